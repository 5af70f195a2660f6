#pragma once
// When the supervisor starts a process again: pure logic on a clock the caller passes in, no
// processes, so every rule is tested with made-up times. Per process kind ([process.<name>]
// restart, restart_backoff_ms, restart_backoff_max_ms, restart_window_s, max_restarts):
//
//   exit ──never──────────────────────────────────────────────▶ leave stopped
//        ──on-failure and exit code 0──────────────────────────▶ leave stopped
//        ──more than max_restarts exits within the window──────▶ give up (with the reason)
//        ──otherwise───────────▶ restart at now + back-off (doubling from restart_backoff up
//                                 to restart_backoff_max; afresh after a run of a window)

#include "transport/cluster_config.hpp"

#include <chrono>
#include <deque>
#include <string>

namespace supernode::services::cluster {

struct restart_rules {
  transport::restart_mode mode = transport::restart_mode::on_failure;
  std::chrono::milliseconds backoff{200};
  std::chrono::milliseconds backoff_max{5000};
  std::chrono::seconds window{60};
  int max_restarts = 5;

  static restart_rules of(const transport::process_config& process);
};

struct restart_decision {
  enum class action { restart, give_up, leave_stopped };
  action what = action::leave_stopped;
  std::chrono::steady_clock::time_point at; // restart: when
  std::chrono::milliseconds backoff{0};     // restart: the wait before it
  int attempt = 0;                          // restart: 1 for the first of a streak
  std::string reason;                       // give_up and leave_stopped: why
};

class restart_policy {
public:
  using clock = std::chrono::steady_clock;

  explicit restart_policy(restart_rules rules) : rules_(rules) {}

  // The process (re)started at `now`.
  void started(clock::time_point now) { started_at_ = now; }
  // It ended at `now`; `failed`: an exit code other than 0 or a signal.
  restart_decision exited(bool failed, clock::time_point now);

  const restart_rules& rules() const { return rules_; }

private:
  restart_rules rules_;
  clock::time_point started_at_{};
  std::deque<clock::time_point> exits_; // restartable exits within the window
  int streak_ = 0;                      // restarts since the last stable run
};

} // namespace supernode::services::cluster
