#include "services/cluster/restart_policy.hpp"

#include <algorithm>

namespace supernode::services::cluster {

restart_rules restart_rules::of(const transport::process_config& process) {
  return {process.restart, process.restart_backoff, process.restart_backoff_max,
          process.restart_window, process.max_restarts};
}

restart_decision restart_policy::exited(bool failed, clock::time_point now) {
  using action = restart_decision::action;
  if (rules_.mode == transport::restart_mode::never)
    return {action::leave_stopped, {}, {}, 0, "restart = \"never\""};
  if (rules_.mode == transport::restart_mode::on_failure && !failed)
    return {action::leave_stopped, {}, {}, 0, "exited with code 0 (restart = \"on-failure\")"};
  // A process that ran a whole window was stable: its earlier troubles are forgiven.
  if (now - started_at_ >= rules_.window) {
    exits_.clear();
    streak_ = 0;
  }
  exits_.push_back(now);
  while (!exits_.empty() && now - exits_.front() >= rules_.window) exits_.pop_front();
  if (static_cast<int>(exits_.size()) > rules_.max_restarts)
    return {action::give_up,
            {},
            {},
            0,
            std::to_string(exits_.size()) + " exits within " +
                std::to_string(rules_.window.count()) +
                " s (max_restarts = " + std::to_string(rules_.max_restarts) + ")"};
  // backoff * 2^streak, capped; the shift stops at the cap so it never overflows.
  auto wait = rules_.backoff;
  for (int i = 0; i < streak_ && wait < rules_.backoff_max; ++i) wait *= 2;
  wait = std::min(wait, rules_.backoff_max);
  ++streak_;
  return {action::restart, now + wait, wait, streak_, {}};
}

} // namespace supernode::services::cluster
