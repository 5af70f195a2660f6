#pragma once
// The numbers a serving benchmark reports, with vLLM's definitions so figures compare:
// TTFT = first token event - send; TPOT = (E2E - TTFT) / (tokens - 1) for tokens > 1;
// ITL = every gap between token events; E2E = last byte - send. Throughputs divide by the run's
// duration; goodput counts only the requests meeting every SLO given.

#include "services/loadgen/request_outcome.hpp"

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace supernode::services::loadgen {

// Linear interpolation between closest ranks (numpy's default): rank h = (n - 1) * p / 100,
// value = v[floor h] + (h - floor h) * (v[floor h + 1] - v[floor h]). `sorted` ascending and
// non-empty, p in [0, 100].
double percentile(const std::vector<double>& sorted, double p);

struct latency_summary {
  size_t count = 0;
  double mean = 0, min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
latency_summary summarize(std::vector<double> values);

// Per-request metrics in milliseconds; ttft absent when no token arrived, tpot when fewer
// than two tokens did.
struct request_metrics {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  double e2e_ms = 0;
};
request_metrics metrics_of(const request_outcome& r);

// Every sample of the successful requests, in milliseconds.
struct latency_samples {
  std::vector<double> ttft_ms, tpot_ms, itl_ms, e2e_ms;
};
latency_samples collect_latencies(const std::vector<request_outcome>& outcomes);

struct slo_targets {
  std::optional<double> ttft_ms, tpot_ms, e2e_ms;
  bool any() const { return ttft_ms || tpot_ms || e2e_ms; }
};
// A request with one token has no TPOT and so meets any TPOT target; one with no token meets
// no TTFT target.
bool meets_slos(const request_metrics& m, const slo_targets& slo);

struct failure_count {
  std::string reason;
  int64_t count = 0;
};

struct bench_report {
  int64_t completed = 0, failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0; // of completed requests
  double request_throughput = 0;                           // completed / s
  double output_throughput = 0;                            // output tokens / s
  double total_token_throughput = 0;                       // (input + output) tokens / s
  std::optional<double> goodput; // requests meeting the SLOs / s, when any SLO is given
  int64_t good_requests = 0;
  latency_summary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::vector<failure_count> failures; // the first distinct reasons, in order of appearance
};

bench_report make_report(const std::vector<request_outcome>& outcomes, double duration_s,
                         const slo_targets& slo, size_t max_failure_reasons = 5);

// Fields in a fixed, reading order (ordered_json), so reports diff cleanly run to run.
nlohmann::ordered_json to_json(const latency_summary& s);
nlohmann::ordered_json to_json(const bench_report& r);

} // namespace supernode::services::loadgen
