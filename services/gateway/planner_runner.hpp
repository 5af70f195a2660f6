#pragma once
// The SLO planner (services/planner/planner.hpp) in a running cluster: gateway-0 runs one when
// [planner] enabled = true, on a thread of its own (the supervisor's answers block; never an
// actor or io thread). Every round, a quarter of [planner] interval_ms:
//
//   supervisor status ─┐
//   TTFT/TPOT p90 of the last interval (latency_window) ─┼▶ planner_sample ─▶ observe, decide
//   scheduler's latest cluster_stats ─┘
//   decision ─▶ logged at info with its reason ─▶ counts changed: the supervisor's scale request
//               ("planner-<n>", on a detached thread: it answers once the change is done)
//            ─▶ batch cap: decode_batch_cap to every decode instance, again every round
//
// A P<->D switch is a count change (one process fewer of one kind, one more of the other); no
// process changes its role in place. No decision is asked for while a scale request waits.

#include "log/log.hpp"
#include "services/gateway/latency_window.hpp"
#include "services/planner/planner.hpp"
#include "services/planner/planner_sampler.hpp"
#include "services/protocol/serving_messages.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace supernode::services::gateway {

// How the planner reaches its cluster; every hook may be called from the planner's thread.
struct planner_hooks {
  // One JSON line to the supervisor and its one-line answer; nothing when none listens.
  // Throws when the answer does not come within `timeout`. Also called on the detached thread
  // of a scale request, so it must not refer to anything that goes with the gateway.
  std::function<std::optional<std::string>(const std::string& request,
                                           std::chrono::milliseconds timeout)>
      ask_supervisor;
  // The scheduler's latest statistics; null before the first.
  std::function<std::shared_ptr<const protocol::cluster_stats>()> stats;
  // TTFT and TPOT p90 of what the gateway measured since the time point.
  std::function<latency_window::p90s(std::chrono::steady_clock::time_point)> latencies;
  // Sends decode_batch_cap{cap} to every decode instance alive.
  std::function<void(int64_t cap)> send_batch_cap;
};

class planner_runner {
public:
  using clock = std::chrono::steady_clock;
  // Scale requests are "<operation_prefix><n>", n from 1: the prefix must differ between
  // runs (the supervisor answers a repeated id with its first answer).
  planner_runner(planner::planner_config config, planner::planner_limits limits,
                 planner::planner_kinds kinds, planner_hooks hooks, log::logger log,
                 std::string operation_prefix);
  ~planner_runner();
  planner_runner(const planner_runner&) = delete;
  planner_runner& operator=(const planner_runner&) = delete;

  void start();
  // Joins the thread; a scale request still waiting finishes (or fails) on its own.
  void stop();

  // One round at `now`: what the thread runs. For tests, without start().
  void round(clock::time_point now);

  // supernode_planner_decisions_total{action} and the planner's gauges, for /metrics.
  std::string render_metrics() const;
  bool scale_waiting() const { return scale_->waiting.load(); }
  int64_t batch_cap() const { return batch_cap_.load(); }

  // How long a drained instance may take before the supervisor kills it.
  static constexpr std::chrono::milliseconds drain_timeout{60000};

private:
  // What a detached scale request shares with the runner.
  struct scale_state {
    std::atomic<bool> waiting{false};
  };
  void apply(const planner::planner_decision& d, const planner::planner_sample& from);
  void warn_once(const std::string& what);

  planner::planner_kinds kinds_;
  planner_hooks hooks_;
  std::string operation_prefix_;
  log::logger log_;
  planner::planner_limits limits_;
  mutable std::mutex mutex_; // planner_: rounds and /metrics
  planner::planner planner_;
  std::atomic<int64_t> batch_cap_{0};
  uint64_t operations_ = 0;
  std::string last_warning_; // the planner's thread's: a problem is logged when it changes
  std::shared_ptr<scale_state> scale_ = std::make_shared<scale_state>();

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace supernode::services::gateway
