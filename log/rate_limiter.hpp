#pragma once
// One line per reason per interval, for what a peer can flood (bad frames, unexpected
// messages): the first occurrence of a reason is logged, later ones within the interval are
// only counted, and the next line of that reason says how many were held back and over how
// long ("… (x 312 in the last 1.0 s)"). A count is carried by the next line of its reason; a
// burst that stops leaves its last count unsaid until the reason comes up again.
//
// Thread-safe. The clock is injectable so tests step time instead of sleeping.

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace supernode::log {

class rate_limiter {
public:
  using clock = std::chrono::steady_clock;
  using now_fn = std::function<clock::time_point()>;

  struct verdict {
    bool emit = false;        // log this occurrence
    uint64_t suppressed = 0;  // occurrences of the reason not logged since its previous line
    clock::duration window{}; // time since that previous line (when suppressed > 0)
  };

  // Distinct reasons kept at most; past that, reasons whose interval has passed are forgotten,
  // and if none has, new reasons share one "too many distinct reasons" entry, so a peer that
  // puts its own bytes into the reason cannot grow the table without bound.
  static constexpr size_t max_reasons = 1024;
  static constexpr std::string_view overflow_reason = "(too many distinct reasons)";

  // `interval` zero logs every occurrence. The default is the process-wide one (log.hpp's
  // default_rate_interval(), SUPERNODE_LOG_RATE_INTERVAL).
  explicit rate_limiter(clock::duration interval, now_fn now = clock::now);
  rate_limiter();

  // Counts one occurrence of `reason` and says whether to log it.
  verdict admit(std::string_view reason);
  clock::duration interval() const { return interval_; }

private:
  struct entry {
    clock::time_point last_line;
    uint64_t suppressed = 0;
  };
  void forget_idle(clock::time_point now);

  clock::duration interval_;
  now_fn now_;
  std::mutex mutex_; // guards entries_
  struct transparent_hash : std::hash<std::string_view> {
    using is_transparent = void;
  };
  std::unordered_map<std::string, entry, transparent_hash, std::equal_to<>> entries_;
};

} // namespace supernode::log
