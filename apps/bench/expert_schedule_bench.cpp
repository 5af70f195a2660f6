#include "apps/bench/expert_schedule_bench.hpp"

#include "apps/bench/kernel_bench_common.hpp"
#include "kernels/thread_pool.hpp"
#include "model/moe_layer.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace supernode::apps {

namespace {

// Every token's routes gathered per expert, as the transformer gathers them.
std::vector<model::expert_batch> batches_for(const model::model_weights& weights,
                                             const model::moe_weights& w, int64_t tokens) {
  const auto& c = weights.config;
  const int64_t h = c.hidden_size;
  const auto x = kernel_bench::pseudo_random(static_cast<size_t>(tokens * h), 5);
  return model::route_and_gather_int8(c, w, x.data(), tokens).batches;
}

} // namespace

nlohmann::json expert_schedule_report(const model::model_weights& weights,
                                      const std::vector<int64_t>& prompt_tokens) {
  const auto& c = weights.config;
  const auto layer = std::find_if(weights.layers.begin(), weights.layers.end(),
                                  [](const auto& l) { return l.is_moe; });
  if (layer == weights.layers.end())
    throw std::invalid_argument("bench model --expert-schedule: the model has no MoE layer");
  // Larger than the last level cache: each run's weights and intermediates start cold, as
  // they do in a prefill where the other layers ran in between.
  std::vector<float> evict(size_t{64} << 20);
  nlohmann::json out;
  for (const int64_t tokens : prompt_tokens) {
    auto batches = batches_for(weights, layer->moe, tokens);
    std::vector<model::expert_batch*> pointers;
    for (auto& b : batches) pointers.push_back(&b);
    const model::expert_schedule schedules[] = {model::expert_schedule::grouped,
                                                model::expert_schedule::one_per_thread};
    double best[2] = {1e30, 1e30};
    std::vector<float> first_out[2];
    for (int round = 0; round < 15; ++round)
      for (int s = 0; s < 2; ++s) {
        for (auto& v : evict) v += 1.0f;
        const auto t0 = std::chrono::steady_clock::now();
        model::run_experts(c, layer->moe, weights.prec, pointers, schedules[s]);
        best[s] = std::min(
            best[s], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        if (round == 0)
          for (auto& b : batches)
            first_out[s].insert(first_out[s].end(), b.out.begin(),
                                b.out.begin() + b.rows * c.hidden_size);
      }
    int64_t active = 0;
    for (auto& b : batches) active += b.rows > 0;
    out.push_back(
        {{"prompt_tokens", tokens},
         {"experts_with_rows", active},
         {"mean_rows_per_expert", tokens * c.num_experts_per_tok / std::max<int64_t>(1, active)},
         {"grouped_ms", best[0] * 1e3},
         {"one_per_thread_ms", best[1] * 1e3},
         {"one_per_thread_speedup", best[0] / best[1]},
         {"same_bits", first_out[0] == first_out[1]},
         {"threads", kernels::thread_pool::shared().size()}});
  }
  return out;
}

} // namespace supernode::apps
