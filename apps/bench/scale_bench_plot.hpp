#pragma once
// The timeline SVG of `bench scale`, written by hand (no plotting library): one row per run
// (planner, fixed smallest, fixed largest), three panels each on the run's clock — instances
// per role, TTFT and TPOT p90 as multiples of their targets, output throughput — with every scale
// event as a vertical line (green: a slot started, red: one drained).

#include "apps/bench/scale_bench_report.hpp"

#include <string>
#include <vector>

namespace supernode::apps {

std::string render_scale_timeline_svg(const std::vector<scale_run_result>& runs,
                                      const services::loadgen::slo_targets& slo, double bin_s,
                                      const std::string& title);

} // namespace supernode::apps
