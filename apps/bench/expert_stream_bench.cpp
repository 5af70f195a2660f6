#include "apps/bench/expert_stream_bench.hpp"

#include "apps/bench/kernel_bench_common.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/quantize.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace supernode::apps {

namespace {
namespace kb = kernel_bench;
namespace k = kernels;
using json = nlohmann::json;

// `small`'s routed experts: 64 per layer, 8 per token; 192 of them (288 MB) are far more than
// any cache holds, so every layer reads its experts from memory as a decode step does.
constexpr int64_t expert_count = 192, experts_per_token = 8, hidden = 1024, inter = 512;

struct expert {
  k::int8_weight gate_up, down;
};

k::quantized_rows quantized(const kb::shape& s, int64_t m) {
  const auto x = kb::shape_activations(s, m);
  k::quantized_rows q;
  k::quantize_rows(x.data(), m, s.k, s.k, q);
  return q;
}

} // namespace

json expert_stream_report(k::thread_pool& pool, int rounds) {
  const kb::shape gate_up{"expert_gate_up", 2 * inter, hidden}, down{"expert_down", hidden, inter};
  const kb::shape* lm = kb::find_shape("lm_head");
  std::fprintf(stderr, "bench kernels --expert-stream: quantizing %lld experts and lm_head\n",
               static_cast<long long>(expert_count));
  std::vector<expert> experts(expert_count);
  {
    const auto wg = kb::shape_weights(gate_up), wd = kb::shape_weights(down);
    for (auto& e : experts) {
      e.gate_up = k::int8_weight::quantize(wg.data(), gate_up.n, gate_up.k);
      e.down = k::int8_weight::quantize(wd.data(), down.n, down.k);
    }
  }
  const k::int8_weight head = [&] {
    const auto w = kb::shape_weights(*lm);
    return k::int8_weight::quantize(w.data(), lm->n, lm->k);
  }();
  const auto x_in = quantized(gate_up, 1), x_mid = quantized(down, 1), x_head = quantized(*lm, 1);
  std::vector<float> y_head(static_cast<size_t>(lm->n));
  std::vector<float> y_up(static_cast<size_t>(experts_per_token * 2 * inter)),
      y_out(static_cast<size_t>(experts_per_token * hidden));

  // Layers of distinct experts per round, enough to stream about as many bytes as lm_head.
  const double layer_bytes =
      experts_per_token * double(experts[0].gate_up.bytes() + experts[0].down.bytes());
  const int64_t layers = std::max<int64_t>(1, static_cast<int64_t>(head.bytes() / layer_bytes));
  uint64_t lcg = 12345;
  auto pick_layer = [&] {
    std::vector<int64_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < experts_per_token) {
      lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
      const int64_t e = static_cast<int64_t>((lcg >> 33) % expert_count);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    return chosen;
  };

  // One layer's routed experts at batch 1: gate_up for all of them, then down for all of them.
  auto grouped_layer = [&](const std::vector<int64_t>& chosen) {
    std::vector<k::gemm_int8_problem> problems;
    for (size_t i = 0; i < chosen.size(); ++i)
      problems.push_back({&x_in, &experts[chosen[i]].gate_up, y_up.data() + i * 2 * inter, 0});
    k::gemm_int8_grouped(problems, pool);
    problems.clear();
    for (size_t i = 0; i < chosen.size(); ++i)
      problems.push_back({&x_mid, &experts[chosen[i]].down, y_out.data() + i * hidden, 0});
    k::gemm_int8_grouped(problems, pool);
  };
  // The same matrices one plain GEMM call each.
  auto one_by_one_layer = [&](const std::vector<int64_t>& chosen) {
    for (size_t i = 0; i < chosen.size(); ++i)
      k::gemm_int8(x_in, experts[chosen[i]].gate_up, y_up.data() + i * 2 * inter, 0, pool);
    for (size_t i = 0; i < chosen.size(); ++i)
      k::gemm_int8(x_mid, experts[chosen[i]].down, y_out.data() + i * hidden, 0, pool);
  };
  auto stream_layers = [&](auto&& layer_fn) {
    std::vector<std::vector<int64_t>> plan(static_cast<size_t>(layers));
    for (auto& p : plan) p = pick_layer();
    double bytes = 0;
    for (const auto& p : plan)
      for (auto e : p) bytes += double(experts[e].gate_up.bytes() + experts[e].down.bytes());
    const double secs = kb::seconds([&] {
      for (const auto& p : plan) layer_fn(p);
    });
    return bytes / secs / 1e9;
  };
  auto stream_head = [&] {
    const double secs =
        kb::seconds([&] { k::gemm_int8(x_head, head, y_head.data(), lm->n, pool); });
    return double(head.bytes()) / secs / 1e9;
  };

  stream_head(); // one untimed pass of each first: page faults and lazy huge-page promotion
  stream_layers(grouped_layer);
  std::vector<double> head_gbs, grouped_gbs, single_gbs, grouped_ratio, single_ratio;
  for (int r = 0; r < rounds; ++r) {
    head_gbs.push_back(stream_head());
    grouped_gbs.push_back(stream_layers(grouped_layer));
    single_gbs.push_back(stream_layers(one_by_one_layer));
    grouped_ratio.push_back(grouped_gbs.back() / head_gbs.back());
    single_ratio.push_back(single_gbs.back() / head_gbs.back());
  }
  auto rounded = [](std::vector<double> v) {
    for (auto& x : v) x = kb::round3(x);
    return v;
  };
  return {{"threads", pool.size()},
          {"experts", expert_count},
          {"experts_per_layer", experts_per_token},
          {"layers_per_round", layers},
          {"lm_head_gbs", rounded(head_gbs)},
          {"grouped_gbs", rounded(grouped_gbs)},
          {"one_by_one_gbs", rounded(single_gbs)},
          {"median_grouped_over_lm_head", kb::round3(kb::median(grouped_ratio))},
          {"median_one_by_one_over_lm_head", kb::round3(kb::median(single_ratio))}};
}

} // namespace supernode::apps
