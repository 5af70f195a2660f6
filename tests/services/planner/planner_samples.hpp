#pragma once
// Samples and configs the planner tests share: a config with round targets, and a sample whose
// every signal sits between "scale down" and "scale up", for a test to move the one it is about.

#include "services/planner/planner.hpp"

#include <string>

namespace supernode::services::planner::testing {

using namespace std::chrono_literals;

inline const auto t0 = planner::clock::time_point{} + 1000s;

// ttft 1000 ms, tpot 100 ms, an interval of 5 s, a cooldown of 10 s, 1 to 4 of each role.
inline planner_config test_config() {
  planner_config c;
  c.enabled = true;
  c.ttft_ms = 1000;
  c.tpot_ms = 100;
  c.interval = 5s;
  c.cooldown = 10s;
  c.min_prefill = 1, c.max_prefill = 4;
  c.min_decode = 1, c.max_decode = 4;
  return c;
}

// TTFT and TPOT at 0.6 of target, KV usage 0.3, nothing queued: neither hot nor cold.
inline planner_sample neutral(std::chrono::milliseconds at, int prefill, int decode) {
  planner_sample s;
  s.at = t0 + at;
  s.prefill.serving = prefill;
  s.decode.serving = decode;
  s.ttft_p90_ms = 600;
  s.tpot_p90_ms = 60;
  s.decode_kv_usage = 0.3;
  s.decode_running = 4;
  s.decode_batch_cap = 64;
  return s;
}

// A decision in one line, "scale_up_prefill: prefill 2, decode 1", or "none": compared whole,
// a failure shows what was decided instead.
inline std::string summary(const std::optional<planner_decision>& d) {
  if (!d) return "none";
  return d->action + ": prefill " + std::to_string(d->target_counts.at("prefill")) + ", decode " +
         std::to_string(d->target_counts.at("decode"));
}

// What a fresh planner decides on one sample, an interval after it.
inline std::optional<planner_decision> first_decision(const planner_sample& s,
                                                      const planner_config& config = test_config(),
                                                      const planner_limits& limits = {}) {
  planner p(config, limits);
  p.observe(s);
  return p.decide(s.at + config.interval);
}

} // namespace supernode::services::planner::testing
