#pragma once
// The planner on /metrics: supernode_planner_decisions_total{action}, a counter per action, every
// action listed from 0 so rate() works from the start, and gauges of the sample it read last
// (supernode_planner_instances{role,state}, TTFT/TPOT p90, queue, KV usage, batch cap). Rendered
// with the gateway's metrics_registry into Prometheus text, for the process that runs the planner
// to append to its /metrics answer. (supernode_instances{role,state} covers every role, MP servers
// included: the gateway renders it from its membership and the scheduler's statistics.)

#include <string>

namespace supernode::services::planner {

class planner;

std::string render_planner_metrics(const planner& p);

} // namespace supernode::services::planner
