#include "services/planner/planner_metrics.hpp"

#include "services/gateway/metrics.hpp"
#include "services/planner/planner.hpp"

namespace supernode::services::planner {

std::string render_planner_metrics(const planner& p) {
  // A registry of its own, filled from the planner's totals: the counters' values are the
  // planner's, so rendering twice never counts twice.
  gateway::metrics_registry metrics;
  for (const auto& [action, count] : p.decisions())
    metrics.add_counter("supernode_planner_decisions_total",
                        "Decisions the SLO planner made, by action", static_cast<double>(count),
                        {{"action", action}});
  return metrics.render();
}

} // namespace supernode::services::planner
