#include "kernels/attention.hpp"

#include "kernels/elementwise.hpp"

#include <algorithm>
#include <vector>

namespace supernode::kernels {

namespace {
// The simd reduction order is fixed at compile time, so it is the same for every call.
float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
} // namespace

void mla_prefill(const mla_prefill_args& a, thread_pool& pool) {
  const int64_t qk = a.nope + a.rope, kvw = a.nope + a.v;
  // Tasks are (head, tile of queries): a key is loaded once per tile instead of once per query,
  // which turns a memory-bound loop into a cache-resident one at long prompts. Every query still
  // computes each score with the same dot and accumulates its output over keys in increasing
  // order, so its result is bit-identical to computing it alone (batch and chunk invariance).
  constexpr int64_t tile = 16;
  const int64_t tiles = (a.n_queries + tile - 1) / tile;
  pool.parallel_for(a.heads * tiles, [&](int64_t task) {
    const int64_t h = task / tiles, i0 = (task % tiles) * tile;
    const int64_t rows = std::min(tile, a.n_queries - i0);
    const int64_t max_keys = a.first_pos + i0 + rows; // the tile's last query sees the most
    std::vector<float> p(rows * max_keys);
    for (int64_t t = 0; t < max_keys; ++t) {
      const float* k = a.kv + (t * a.heads + h) * kvw;
      const float* kpe = a.cache.token(t) + a.cache.kv_lora;
      // Query i0 + r sees keys 0 .. first_pos + i0 + r.
      for (int64_t r = std::max<int64_t>(0, t - a.first_pos - i0); r < rows; ++r) {
        const float* q = a.q + ((i0 + r) * a.heads + h) * qk;
        p[r * max_keys + t] = (dot(q, k, a.nope) + dot(q + a.nope, kpe, a.rope)) * a.softmax_scale;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      softmax(p.data() + r * max_keys, a.first_pos + i0 + r + 1);
      float* o = a.out + ((i0 + r) * a.heads + h) * a.v;
      std::fill(o, o + a.v, 0.0f);
    }
    for (int64_t t = 0; t < max_keys; ++t) {
      const float* v = a.kv + (t * a.heads + h) * kvw + a.nope;
      for (int64_t r = std::max<int64_t>(0, t - a.first_pos - i0); r < rows; ++r)
        axpy(p[r * max_keys + t], v, a.out + ((i0 + r) * a.heads + h) * a.v, a.v);
    }
  });
}

void mla_decode(const mla_decode_args& a) {
  const int64_t keys = a.pos + 1, lora = a.cache.kv_lora, rope = a.cache.rope;
  std::vector<float> p(keys);
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* ql = a.q_latent + h * lora;
    const float* qp = a.q_pe + h * rope;
    for (int64_t t = 0; t < keys; ++t) {
      const float* c = a.cache.token(t);
      p[t] = (dot(ql, c, lora) + dot(qp, c + lora, rope)) * a.softmax_scale;
    }
    softmax(p.data(), keys);
    float* o = a.out_latent + h * lora;
    std::fill(o, o + lora, 0.0f);
    for (int64_t t = 0; t < keys; ++t) axpy(p[t], a.cache.token(t), o, lora);
  }
}

} // namespace supernode::kernels
