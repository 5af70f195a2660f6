#include "apps/bench/attention_kernel_bench.hpp"

#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/kernel_isa.hpp"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <string>

namespace supernode::apps {

namespace {

using kernels::mla_prefill_args;

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The kernel the flash tiles replaced (tree before issue 17's attention work), kept as the
// baseline: tasks of (head, 16 queries), every score of a row first, a two-pass softmax, then
// the values; the kv rows read in place.
void untiled_prefill(const mla_prefill_args& a, kernels::thread_pool& pool) {
  const int64_t qk = a.nope + a.rope, kvw = a.nope + a.v;
  constexpr int64_t tile = 16;
  const int64_t tiles = (a.n_queries + tile - 1) / tile;
  pool.parallel_for(a.heads * tiles, [&](int64_t task) {
    const int64_t h = task / tiles, i0 = (task % tiles) * tile;
    const int64_t rows = std::min(tile, a.n_queries - i0);
    const int64_t max_keys = a.first_pos + i0 + rows;
    std::vector<float> p(rows * max_keys);
    for (int64_t t = 0; t < max_keys; ++t) {
      const float* k = a.kv + (t * a.heads + h) * kvw;
      const float* kpe = a.cache.token(t) + a.cache.kv_lora;
      for (int64_t r = std::max<int64_t>(0, t - a.first_pos - i0); r < rows; ++r) {
        const float* q = a.q + ((i0 + r) * a.heads + h) * qk;
        p[r * max_keys + t] = (dot(q, k, a.nope) + dot(q + a.nope, kpe, a.rope)) * a.softmax_scale;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      kernels::softmax(p.data() + r * max_keys, a.first_pos + i0 + r + 1);
      float* o = a.out + ((i0 + r) * a.heads + h) * a.v;
      std::fill(o, o + a.v, 0.0f);
    }
    for (int64_t t = 0; t < max_keys; ++t) {
      const float* v = a.kv + (t * a.heads + h) * kvw + a.nope;
      for (int64_t r = std::max<int64_t>(0, t - a.first_pos - i0); r < rows; ++r)
        kernels::axpy(p[r * max_keys + t], v, a.out + ((i0 + r) * a.heads + h) * a.v, a.v);
    }
  });
}

std::vector<float> normal_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct variant {
  std::string name;
  std::function<void(const mla_prefill_args&)> run;
};

std::vector<variant> variants() {
  auto& pool = kernels::thread_pool::shared();
  std::vector<variant> v;
  v.push_back({"untiled_before", [&pool](const mla_prefill_args& a) { untiled_prefill(a, pool); }});
  const kernels::kernel_isa best = kernels::best_kernel_isa();
  for (auto isa : {kernels::kernel_isa::avx2, kernels::kernel_isa::avx512_vnni}) {
    if (!kernels::kernel_isa_supported(isa)) continue;
    v.push_back(
        {std::string("flash_fp32_") + (isa == kernels::kernel_isa::avx2 ? "avx2" : "avx512"),
         [&pool, isa, best](const mla_prefill_args& a) {
           kernels::set_kernel_isa(isa);
           kernels::mla_prefill(a, pool);
           kernels::set_kernel_isa(best);
         }});
  }
  if (kernels::attention_bf16_supported())
    v.push_back({"flash_bf16_avx512", [&pool](const mla_prefill_args& a) {
                   kernels::set_attention_scores(kernels::attention_scores::bf16);
                   kernels::mla_prefill(a, pool);
                   kernels::set_attention_scores(kernels::attention_scores::fp32);
                 }});
  return v;
}

} // namespace

nlohmann::json attention_kernel_report(const model::model_config& c,
                                       const std::vector<attention_chunk>& chunks) {
  const int64_t heads = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim,
                vd = c.v_head_dim, lora = c.kv_lora_rank;
  const auto paths = variants();
  nlohmann::json out;
  for (const auto [first, n] : chunks) {
    constexpr int64_t block = 16;
    const int64_t keys = first + n;
    const auto q = normal_floats(n * heads * (nope + rope), 1);
    const auto kv = normal_floats(keys * heads * (nope + vd), 2);
    const auto cache = normal_floats(((keys + block - 1) / block) * block * (lora + rope), 3);
    std::vector<const float*> blocks;
    for (int64_t b = 0; b * block < keys; ++b)
      blocks.push_back(cache.data() + b * block * (lora + rope));
    std::vector<float> o(n * heads * vd);
    const mla_prefill_args a{
        q.data(), kv.data(), {blocks, block, lora, rope, keys},     n,       first, heads, nope,
        rope,     vd,        static_cast<float>(c.softmax_scale()), o.data()};
    std::vector<double> best(paths.size(), 1e30);
    // Seven rounds, every path once per round; the best of each (the least disturbed by the
    // other processes on the machine).
    for (int rep = 0; rep < 7; ++rep)
      for (size_t p = 0; p < paths.size(); ++p) {
        const auto t0 = std::chrono::steady_clock::now();
        paths[p].run(a);
        best[p] = std::min(
            best[p], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    nlohmann::json row{{"cached_tokens", first},
                       {"new_tokens", n},
                       {"heads", heads},
                       {"layers", c.num_hidden_layers}};
    for (size_t p = 0; p < paths.size(); ++p) row["ms_per_layer"][paths[p].name] = best[p] * 1e3;
    row["flash_best_over_untiled"] = best[0] / *std::min_element(best.begin() + 1, best.end());
    out.push_back(row);
  }
  return out;
}

} // namespace supernode::apps
