#include "services/loadgen/report.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

namespace supernode::services::loadgen {

double percentile(const std::vector<double>& sorted, double p) {
  const double rank = static_cast<double>(sorted.size() - 1) * p / 100.0;
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

latency_summary summarize(std::vector<double> values) {
  latency_summary s;
  s.count = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(s.count);
  s.min = values.front();
  s.max = values.back();
  s.p50 = percentile(values, 50);
  s.p90 = percentile(values, 90);
  s.p99 = percentile(values, 99);
  return s;
}

request_metrics metrics_of(const request_outcome& r) {
  request_metrics m;
  m.e2e_ms = (r.end_s - r.send_s) * 1e3;
  if (r.token_times_s.empty()) return m;
  m.ttft_ms = (r.token_times_s.front() - r.send_s) * 1e3;
  if (r.completion_tokens > 1)
    m.tpot_ms = (m.e2e_ms - *m.ttft_ms) / static_cast<double>(r.completion_tokens - 1);
  return m;
}

latency_samples collect_latencies(const std::vector<request_outcome>& outcomes) {
  latency_samples s;
  for (const auto& r : outcomes) {
    if (!r.ok) continue;
    const auto m = metrics_of(r);
    s.e2e_ms.push_back(m.e2e_ms);
    if (m.ttft_ms) s.ttft_ms.push_back(*m.ttft_ms);
    if (m.tpot_ms) s.tpot_ms.push_back(*m.tpot_ms);
    for (size_t i = 1; i < r.token_times_s.size(); ++i)
      s.itl_ms.push_back((r.token_times_s[i] - r.token_times_s[i - 1]) * 1e3);
  }
  return s;
}

bool meets_slos(const request_metrics& m, const slo_targets& slo) {
  if (slo.ttft_ms && !(m.ttft_ms && *m.ttft_ms <= *slo.ttft_ms)) return false;
  if (slo.tpot_ms && m.tpot_ms && *m.tpot_ms > *slo.tpot_ms) return false;
  if (slo.e2e_ms && m.e2e_ms > *slo.e2e_ms) return false;
  return true;
}

bench_report make_report(const std::vector<request_outcome>& outcomes, double duration_s,
                         const slo_targets& slo, size_t max_failure_reasons) {
  bench_report r;
  r.duration_s = duration_s;
  for (const auto& o : outcomes) {
    if (!o.ok) {
      ++r.failed;
      auto known = std::find_if(r.failures.begin(), r.failures.end(),
                                [&](const failure_count& f) { return f.reason == o.error; });
      if (known != r.failures.end())
        ++known->count;
      else if (r.failures.size() < max_failure_reasons)
        r.failures.push_back({o.error, 1});
      continue;
    }
    ++r.completed;
    r.total_input_tokens += o.prompt_tokens;
    r.total_output_tokens += o.completion_tokens;
    if (slo.any() && meets_slos(metrics_of(o), slo)) ++r.good_requests;
  }
  const auto per_second = [&](double x) { return duration_s > 0 ? x / duration_s : 0.0; };
  r.request_throughput = per_second(static_cast<double>(r.completed));
  r.output_throughput = per_second(static_cast<double>(r.total_output_tokens));
  r.total_token_throughput =
      per_second(static_cast<double>(r.total_input_tokens + r.total_output_tokens));
  if (slo.any()) r.goodput = per_second(static_cast<double>(r.good_requests));

  auto samples = collect_latencies(outcomes);
  r.ttft_ms = summarize(std::move(samples.ttft_ms));
  r.tpot_ms = summarize(std::move(samples.tpot_ms));
  r.itl_ms = summarize(std::move(samples.itl_ms));
  r.e2e_ms = summarize(std::move(samples.e2e_ms));
  return r;
}

nlohmann::ordered_json to_json(const latency_summary& s) {
  nlohmann::ordered_json j;
  j["count"] = s.count;
  for (auto [name, value] : {std::pair{"mean", s.mean},
                             {"min", s.min},
                             {"p50", s.p50},
                             {"p90", s.p90},
                             {"p99", s.p99},
                             {"max", s.max}})
    j[name] = s.count ? nlohmann::ordered_json(value) : nlohmann::ordered_json(nullptr);
  return j;
}

nlohmann::ordered_json to_json(const bench_report& r) {
  nlohmann::ordered_json j;
  j["completed"] = r.completed;
  j["failed"] = r.failed;
  j["duration_s"] = r.duration_s;
  j["total_input_tokens"] = r.total_input_tokens;
  j["total_output_tokens"] = r.total_output_tokens;
  j["request_throughput"] = r.request_throughput;
  j["output_throughput"] = r.output_throughput;
  j["total_token_throughput"] = r.total_token_throughput;
  j["goodput"] = r.goodput ? nlohmann::ordered_json(*r.goodput) : nlohmann::ordered_json(nullptr);
  j["good_requests"] =
      r.goodput ? nlohmann::ordered_json(r.good_requests) : nlohmann::ordered_json(nullptr);
  j["ttft_ms"] = to_json(r.ttft_ms);
  j["tpot_ms"] = to_json(r.tpot_ms);
  j["itl_ms"] = to_json(r.itl_ms);
  j["e2e_ms"] = to_json(r.e2e_ms);
  auto& failures = j["failures"] = nlohmann::ordered_json::array();
  for (const auto& f : r.failures) failures.push_back({{"reason", f.reason}, {"count", f.count}});
  return j;
}

} // namespace supernode::services::loadgen
