#include "services/planner/planner_metrics.hpp"

#include "services/gateway/metrics.hpp"
#include "services/planner/planner.hpp"

namespace supernode::services::planner {

namespace {

// What the planner read last, as gauges: the numbers its next decision goes by.
void add_sample_gauges(gateway::metrics_registry& metrics, const planner_sample& s) {
  for (const auto& [role, counts] : {std::pair{"prefill", s.prefill}, {"decode", s.decode}})
    for (const auto& [state, n] : {std::pair{"serving", counts.serving},
                                   {"starting", counts.starting},
                                   {"draining", counts.draining}})
      metrics.set_gauge("supernode_planner_instances",
                        "Instances of a role by phase, as the planner read them last", n,
                        {{"role", role}, {"state", state}});
  auto latency = [&](const char* name, const char* help, const std::optional<double>& ms) {
    if (ms) metrics.set_gauge(name, help, *ms / 1e3);
  };
  latency("supernode_planner_ttft_p90_seconds",
          "TTFT p90 over the planner's last window (absent: no request in it)", s.ttft_p90_ms);
  latency("supernode_planner_tpot_p90_seconds",
          "TPOT p90 over the planner's last window (absent: no request in it)", s.tpot_p90_ms);
  metrics.set_gauge("supernode_planner_queued",
                    "Requests waiting at the scheduler or for a decode seat, as read",
                    static_cast<double>(s.queued));
  metrics.set_gauge("supernode_planner_decode_kv_usage",
                    "Used / all KV blocks over the decode instances, as read", s.decode_kv_usage);
  metrics.set_gauge("supernode_planner_decode_batch_cap",
                    "The decode batch cap the planner set (0: [decode] max_batch)",
                    static_cast<double>(s.decode_batch_cap));
}

} // namespace

std::string render_planner_metrics(const planner& p) {
  // A registry of its own, filled from the planner's totals: the counters' values are the
  // planner's, so rendering twice never counts twice.
  gateway::metrics_registry metrics;
  for (const auto& [action, count] : p.decisions())
    metrics.add_counter("supernode_planner_decisions_total",
                        "Decisions the SLO planner made, by action", static_cast<double>(count),
                        {{"action", action}});
  if (p.latest()) add_sample_gauges(metrics, *p.latest());
  return metrics.render();
}

} // namespace supernode::services::planner
