#pragma once
// The SLO planner's decisions: how many prefill and decode instances, which instance switches
// role, and the decode batch cap. Pure logic on a clock the caller passes in, no processes, so
// every rule is tested with a scripted latency feed; the caller (the supervisor's scale
// operation) measures, observe()s, asks decide() and applies what it answers.
//
//   observe(sample) ... decide(now) ──in progress, cooldown or interval not over──▶ nothing
//                                    ──a role outside [min, max] or over max_total──▶ one step
//                                      back inside
//                                    ──a role over its target─────▶ scale it up one; at
//                                      max_total, switch one from the other role if that one
//                                      is well under its target
//                                    ──no role over target, one well under and idle──▶
//                                      scale it down one
//                                    ──the fitted batch cap moved──▶ set_batch_cap (or rides
//                                      along with the count change)
//
// The rules and their thresholds: docs/planner.md and the comments in planner.cpp.

#include "services/planner/planner_config.hpp"
#include "services/planner/tpot_model.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace supernode::services::planner {

// Instances of one role by state, as the supervisor's status lists them.
struct role_counts {
  int serving = 0;
  int starting = 0;
  int draining = 0;
  bool changing() const { return starting > 0 || draining > 0; }
};

// What the cluster measured, at one moment.
struct planner_sample {
  std::chrono::steady_clock::time_point at;
  role_counts prefill, decode;
  // p90 over the requests that finished in the last window; none when none finished.
  std::optional<double> ttft_p90_ms, tpot_p90_ms;
  int64_t queued = 0;                     // requests admitted but not yet placed
  int64_t prefill_outstanding_tokens = 0; // prompt tokens waiting at or in prefill instances
  double decode_kv_usage = 0;             // used / all KV blocks over the decode instances
  int64_t decode_running = 0;             // sequences in decode batches, all instances
  int64_t decode_batch_cap = 0;           // the cap each decode instance runs with; 0: max_batch
};

// What the planner plans within besides [planner]: the sizes the other tables give each
// instance.
struct planner_limits {
  int64_t decode_max_batch = 64;       // [decode] max_batch: the batch cap never exceeds it
  int64_t prefill_token_budget = 2048; // [prefill] token_budget: one step's prompt tokens
};

struct role_switch {
  std::string from, to; // "prefill", "decode"
  int count = 1;
};

struct planner_decision {
  std::map<std::string, int> target_counts; // "prefill", "decode" → serving count to reach
  std::vector<role_switch> switches;        // instances that change role (counted in targets)
  std::optional<int> decode_batch_cap;      // the new cap, when it changes
  // scale_up_prefill, scale_down_prefill, scale_up_decode, scale_down_decode, switch_p_to_d,
  // switch_d_to_p or set_batch_cap (a cap change alone; with a count change it rides along).
  std::string action;
  std::string reason; // the rule and the numbers that drove it, for the log
};

// Every action decide() may answer, as the decisions counter labels them.
const std::vector<std::string>& planner_actions();

class planner {
public:
  using clock = std::chrono::steady_clock;

  planner(planner_config config, planner_limits limits);

  // The cluster as measured at sample.at (samples come in time order).
  void observe(const planner_sample& sample);

  // At most one decision per interval, from the latest sample: nothing while a change is in
  // progress (a role has instances starting or draining), within cooldown after a count change
  // finished, before an interval has passed since the last evaluation (or the first sample),
  // or when nothing needs to change.
  std::optional<planner_decision> decide(clock::time_point now);

  // Decisions made so far, by action (every action present, 0 when never taken).
  const std::map<std::string, uint64_t>& decisions() const { return decisions_; }
  // The latest sample observed, for gauges.
  const std::optional<planner_sample>& latest() const { return latest_; }
  // The batch cap the TPOT line gives now (none without batch_cap or before the line fits).
  std::optional<int> fitted_batch_cap() const;
  const planner_config& config() const { return config_; }

private:
  std::optional<planner_decision> evaluate(const planner_sample& s);
  std::optional<int> batch_cap_change(const planner_sample& s) const;
  planner_decision record(planner_decision d, const planner_sample& s, clock::time_point now);

  planner_config config_;
  planner_limits limits_;
  tpot_model tpot_;
  std::optional<planner_sample> latest_;
  clock::time_point next_evaluation_{};
  clock::time_point cooldown_until_{};
  std::optional<int64_t> queued_at_last_evaluation_;
  // Since when each role has been idle at every evaluation (scale_down_after).
  std::map<std::string, clock::time_point> idle_since_;
  std::map<std::string, uint64_t> decisions_;
};

} // namespace supernode::services::planner
