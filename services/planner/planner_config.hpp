#pragma once
// The [planner] table: the SLO targets and bounds the planner (planner.hpp) decides instance
// counts and the decode batch cap within. Read by serving_config (so every process of a cluster
// agrees); off by default. Every key, with its type, default and range: docs/configuration.md;
// the rules that use them: docs/planner.md.
//
//   [planner]  enabled = false   ttft_ms = 1000   tpot_ms = 100   interval_ms = 5000
//              min_prefill = 1   max_prefill = 4   min_decode = 1   max_decode = 4
//              max_total = 0     # 0: max_prefill + max_decode; less: P<->D switches when capped
//              cooldown_ms = 10000   scale_down_after_ms = 0   scale_down_below = 0.5
//              kv_high = 0.85   kv_low = 0.5
//              batch_cap = false     # also cap the decode batch from measured TPOT

#include <chrono>
#include <cstdint>

namespace supernode::services::planner {

struct planner_config {
  bool enabled = false;
  // p90 targets over the last window of finished requests.
  int64_t ttft_ms = 1000;
  int64_t tpot_ms = 100;
  // One decision at most per interval: seconds, not minutes, since our processes start in
  // about a second.
  std::chrono::milliseconds interval{5000};
  int32_t min_prefill = 1, max_prefill = 4;
  int32_t min_decode = 1, max_decode = 4;
  int32_t max_total = 0; // prefill + decode; 0: max_prefill + max_decode
  // No count change within this long after the last one finished (its latencies settle first).
  std::chrono::milliseconds cooldown{10000};
  // A role is scaled down only once it has been idle (well under target, nothing queued) at
  // every evaluation for this long: one quiet moment under a high load is not a low load.
  // 0: at the first idle evaluation.
  std::chrono::milliseconds scale_down_after{0};
  // Hysteresis: a role is scaled up when its p90 is over target, down only when under this
  // fraction of it (and idle), so a load near the target does not flap.
  double scale_down_below = 0.5;
  // Decode KV usage (used / all blocks) above which decode is scaled up, and below which (as
  // the remaining instances would see it after one drains) it may be scaled down.
  double kv_high = 0.85;
  double kv_low = 0.5;
  // Also set the decode instances' batch cap so the predicted TPOT p90 meets tpot_ms.
  bool batch_cap = false;

  // max_total, or the sum of the maxima when it is 0.
  int32_t total_cap() const { return max_total > 0 ? max_total : max_prefill + max_decode; }
};

} // namespace supernode::services::planner
