#pragma once
// The gateway's latencies of the last few seconds, for the planner: time to first token as each
// request gets its first token, time per output token as each request finishes, each kept with
// when it was measured, and their p90 over any recent window. The /metrics histograms count
// since start and cannot answer "the last five seconds"; this can. Thread-safe: the tracker
// thread adds, the planner's thread reads.

#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace supernode::services::gateway {

class latency_window {
public:
  using clock = std::chrono::steady_clock;
  // Keeps what was measured in the last `keep`, and at most `max_entries` of each kind.
  explicit latency_window(std::chrono::milliseconds keep = std::chrono::minutes(5),
                          size_t max_entries = 65536)
      : keep_(keep), max_entries_(max_entries) {}

  void add_ttft(clock::time_point at, double ms);
  void add_tpot(clock::time_point at, double ms);

  struct p90s {
    std::optional<double> ttft_ms, tpot_ms; // none: nothing measured in the window
  };
  // Nearest-rank p90 of what was measured at or after `since`.
  p90s p90_since(clock::time_point since) const;

private:
  using series = std::deque<std::pair<clock::time_point, double>>;
  void add(series& s, clock::time_point at, double ms);
  static std::optional<double> p90(const series& s, clock::time_point since);

  std::chrono::milliseconds keep_;
  size_t max_entries_;
  mutable std::mutex mutex_;
  series ttft_, tpot_;
};

} // namespace supernode::services::gateway
