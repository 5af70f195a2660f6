#pragma once
// Leveled logs that serve a fault run: every line names the instance that wrote it, that
// instance's incarnation (a restarted process is a new one) and the request it concerns, so the
// logs of a cluster's processes can be merged and followed across a restart.
//
// Adopting it (replacing a `std::fprintf(stderr, ...)`):
//
//   #include "log/log.hpp"
//   log::logger log_{instance_name, incarnation};   // one per role instance, kept as a member
//   log_.warn("tokens for {} lost: {}", gateway, reason);          // fmt syntax, checked at
//   compile time log_.for_request(id).info("placed on {}", decode);             // a line about one
//   request log_.limited(limiter_, log::level::warn, "bad frame from " + peer,   // a peer can
//   flood it:
//                "bad frame #{} from {}: {}", seq, peer, what);           // one line per reason
//                per s
//
// A logger is a small value (a name and a number), not a global: several role instances share
// one process in the embedded shape, and each logs as itself. Without an instance at hand
// (start-up, a command-line tool) use log::process(), named after the process's command.
//
// Output goes to stderr, one line per call, flushed per line, through one process-wide spdlog
// sink, in one of two formats:
//   text  2025-05-01T09:37:32.123Z WARN  instance=prefill-0 incarnation=1746091052000017 request=-
//   bad frame #3 from decode-0: magic json
//   {"time":"2025-05-01T09:37:32.123456Z","level":"warn","instance":"prefill-0",
//          "incarnation":1746091052000017,"request":null,"msg":"bad frame
//          ...","suppressed":312,"window_s":1.0}
// (suppressed and window_s only on a rate-limited line that follows held-back ones; in text
// they read "… (x 312 in the last 1.0 s)"). The level and format are set by the `supernode`
// binary's global options --log-level and --log-format, or by SUPERNODE_LOG_LEVEL and
// SUPERNODE_LOG_FORMAT, which it exports so the processes it starts log the same way.

#include "log/rate_limiter.hpp"

#include <chrono>
#include <cstdint>
#include <fmt/format.h>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace supernode::log {

enum class level : uint8_t { trace, debug, info, warn, error, off };
enum class format : uint8_t { text, json };

const char* to_string(level l);
const char* to_string(format f);
// "trace" … "error", "off"; "warning" is taken for "warn". Nothing for anything else.
std::optional<level> parse_level(std::string_view text);
// "text" or "json".
std::optional<format> parse_format(std::string_view text);

// Process-wide settings (atomics: any thread may log while another sets them).
void set_level(level l);
level current_level();
void set_format(format f);
format current_format();
void set_default_rate_interval(std::chrono::steady_clock::duration interval);
std::chrono::steady_clock::duration default_rate_interval();
// Reads SUPERNODE_LOG_LEVEL, SUPERNODE_LOG_FORMAT and SUPERNODE_LOG_RATE_INTERVAL (seconds,
// 0 logs every occurrence); unset ones leave the setting as it is. Throws std::invalid_argument
// naming the variable whose value is not understood.
void configure_from_env();
// Writes the current level and format into those variables, for child processes to inherit.
// setenv is not thread-safe: call it at start-up, before other threads run.
void export_to_env();
// Lines go to `out` instead of stderr (tests read what was logged); nullptr restores stderr.
void redirect_for_testing(std::ostream* out);

// What a rate-limited line adds: how many lines of its reason were held back, over how long.
struct suppressed_count {
  uint64_t count = 0;
  double window_seconds = 0;
};

class logger;

namespace detail {
// trace() … error() for a logger and for a logger bound to a request, written once.
template<class Self>
class level_calls {
public:
  template<class... Args>
  void trace(fmt::format_string<Args...> f, Args&&... args) const {
    at(level::trace, f, std::forward<Args>(args)...);
  }
  template<class... Args>
  void debug(fmt::format_string<Args...> f, Args&&... args) const {
    at(level::debug, f, std::forward<Args>(args)...);
  }
  template<class... Args>
  void info(fmt::format_string<Args...> f, Args&&... args) const {
    at(level::info, f, std::forward<Args>(args)...);
  }
  template<class... Args>
  void warn(fmt::format_string<Args...> f, Args&&... args) const {
    at(level::warn, f, std::forward<Args>(args)...);
  }
  template<class... Args>
  void error(fmt::format_string<Args...> f, Args&&... args) const {
    at(level::error, f, std::forward<Args>(args)...);
  }
  // The message is formatted only when the level is enabled.
  template<class... Args>
  void at(level l, fmt::format_string<Args...> f, Args&&... args) const {
    if (l < current_level()) return;
    self().write(l, fmt::format(f, std::forward<Args>(args)...), nullptr);
  }
  // Through `limiter`, keyed by `reason`: formatted and written only when the limiter lets
  // this occurrence through, with the count of those it held back since.
  template<class... Args>
  void limited(rate_limiter& limiter, level l, std::string_view reason,
               fmt::format_string<Args...> f, Args&&... args) const {
    if (l < current_level()) return;
    const auto v = limiter.admit(reason);
    if (!v.emit) return;
    const suppressed_count held{v.suppressed, std::chrono::duration<double>(v.window).count()};
    self().write(l, fmt::format(f, std::forward<Args>(args)...),
                 v.suppressed > 0 ? &held : nullptr);
  }

private:
  const Self& self() const { return static_cast<const Self&>(*this); }
};
} // namespace detail

// A logger bound to one request id; from logger::for_request, used within the statement.
class request_logger : public detail::level_calls<request_logger> {
public:
  request_logger(const logger& owner, std::string_view request)
      : owner_(owner), request_(request) {}
  void write(level l, std::string_view msg, const suppressed_count* held) const;

private:
  const logger& owner_;
  std::string_view request_;
};

class logger : public detail::level_calls<logger> {
public:
  // instance "-" (nobody in particular), incarnation 0.
  logger();
  explicit logger(std::string instance, uint64_t incarnation = 0);

  const std::string& instance() const { return instance_; }
  uint64_t incarnation() const { return incarnation_; }
  static bool enabled(level l) { return l >= current_level(); }

  // The same calls, each line naming `request`.
  request_logger for_request(std::string_view request) const { return {*this, request}; }

  // One finished line; `request` empty means none (text "-", JSON null).
  void write(level l, std::string_view msg, const suppressed_count* held,
             std::string_view request = {}) const;

private:
  std::string instance_;
  uint64_t incarnation_ = 0;
};

inline void request_logger::write(level l, std::string_view msg,
                                  const suppressed_count* held) const {
  owner_.write(l, msg, held, request_);
}

// The process as a whole (instance "supernode", incarnation 0): lines not about one instance.
const logger& process();

} // namespace supernode::log
