#pragma once
// The timeline of a fault-injection run as a self-contained SVG: output tokens per second and
// each request's TTFT over time (failed requests marked where they ended), with every fault's
// window shaded and its detection and recovery marked. Axes and text helpers are the latency
// plot's (services/loadgen/latency_plot.hpp).

#include "services/chaos/chaos_report.hpp"
#include "services/loadgen/request_outcome.hpp"

#include <string>
#include <vector>

namespace supernode::services::chaos {

std::string render_timeline_svg(const std::vector<loadgen::request_outcome>& outcomes,
                                const std::vector<fault_record>& faults, const std::string& title,
                                const std::string& subtitle);

} // namespace supernode::services::chaos
