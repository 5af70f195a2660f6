#pragma once
// What `bench scale` reports of a run: the loadgen's serving report (services/loadgen/report.hpp)
// with SLO attainment (the share of requests meeting both planner targets, failed ones
// counting as missed), the instance-seconds the run used, every scale event with how long it
// took, and the run's time course in bins (TTFT/TPOT p90, output throughput) for the timeline.

#include "apps/bench/scale_bench_run.hpp"
#include "services/loadgen/report.hpp"

#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

namespace supernode::apps {

// One slice of a run's time: requests by when they ended, tokens by when they arrived.
struct time_bin {
  double from_s = 0, to_s = 0;
  std::optional<double> ttft_p90_ms, tpot_p90_ms;
  double output_tokens_per_s = 0;
};
std::vector<time_bin> bin_run(const scale_run_result& run, double bin_s);

// Prefill and decode instances alive (starting, serving or draining), integrated over the
// polled timeline up to the run's end.
double instance_seconds(const scale_run_result& run);

nlohmann::ordered_json summarize_run(const scale_run_result& run,
                                     const services::loadgen::slo_targets& slo, double bin_s);

} // namespace supernode::apps
