#include "apps/bench/engine_baseline.hpp"

#include "model/engine.hpp"

#include <algorithm>
#include <chrono>

namespace supernode::apps {

std::vector<model::generation_request>
engine_requests(const std::vector<services::loadgen::planned_request>& plan, size_t first,
                size_t count) {
  std::vector<model::generation_request> requests;
  for (size_t i = first; i < std::min(plan.size(), first + count); ++i) {
    model::generation_request r;
    r.prompt = plan[i].prompt;
    r.max_tokens = static_cast<int32_t>(plan[i].max_tokens);
    r.stop_at_eos = false; // as the load generator asks the server (ignore_eos)
    requests.push_back(std::move(r));
  }
  return requests;
}

nlohmann::json run_engine_baseline(const std::filesystem::path& model_dir,
                                   const std::vector<services::loadgen::planned_request>& plan,
                                   int64_t concurrency) {
  model::load_options lo;
  lo.load_mtp = false;
  auto weights = model::model_weights::load(model_dir, lo);
  const int64_t batch = std::max<int64_t>(1, concurrency);
  int64_t kv_tokens = 0;
  for (auto& r : plan)
    kv_tokens = std::max<int64_t>(kv_tokens, static_cast<int64_t>(r.prompt.size()) + r.max_tokens);
  model::engine_options eo;
  eo.max_context = kv_tokens;
  eo.kv_blocks = batch * eo.max_context / eo.block_size + batch;
  model::reference_engine engine(weights, eo);

  int64_t output_tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t first = 0; first < plan.size(); first += static_cast<size_t>(batch)) {
    const auto requests = engine_requests(plan, first, static_cast<size_t>(batch));
    for (auto& res : engine.generate_batch(requests))
      output_tokens += static_cast<int64_t>(res.tokens.size());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {{"model", model_dir.string()}, {"concurrency", batch},
          {"requests", plan.size()},     {"output_tokens", output_tokens},
          {"duration_s", seconds},       {"output_throughput", output_tokens / seconds}};
}

} // namespace supernode::apps
