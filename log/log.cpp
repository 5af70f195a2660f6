#include "log/log.hpp"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <stdexcept>

namespace supernode::log {

namespace {

std::atomic<level> level_{level::info};
std::atomic<format> format_{format::text};
std::atomic<std::chrono::steady_clock::rep> rate_interval_{
    std::chrono::steady_clock::duration(std::chrono::seconds(1)).count()};

// The spdlog logger every line goes through and the format its pattern is for; replaced whole
// (never changed in place) when the format or the output changes, so a thread logging meanwhile
// writes a whole line the old way or the new way.
struct output {
  std::shared_ptr<spdlog::logger> sink;
  format fmt;
};
// A plain shared_ptr under a mutex, not std::atomic<std::shared_ptr>: GCC 12's load of the
// latter unlocks with a relaxed store, which TSan reports as a race with the next replacement
// (google/sanitizers#1558). Uncontended, the lock costs nothing beside spdlog's own per line.
std::mutex output_mutex_;
std::shared_ptr<const output> output_; // guarded by output_mutex_
std::ostream* test_output_ = nullptr;  // guarded by output_mutex_

// spdlog supplies the time (UTC) and the output; the rest of the line is ours, in %v.
const char* pattern_of(format f) {
  return f == format::json ? R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ",%v})" : "%Y-%m-%dT%H:%M:%S.%eZ %v";
}

// Caller holds output_mutex_.
void install(format f) {
  spdlog::sink_ptr sink;
  if (test_output_)
    sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*test_output_, true);
  else
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>(); // flushes every line
  sink->set_formatter(std::make_unique<spdlog::pattern_formatter>(
      pattern_of(f), spdlog::pattern_time_type::utc, std::string("\n")));
  auto l = std::make_shared<spdlog::logger>("supernode", std::move(sink));
  l->set_level(spdlog::level::trace); // levels are filtered before formatting, in log.hpp
  format_.store(f);
  output_ = std::make_shared<const output>(output{std::move(l), f});
}

std::shared_ptr<const output> current_output() {
  std::lock_guard lock(output_mutex_);
  if (!output_) install(format_.load());
  return output_;
}

// Text keeps one record on one line whatever the message holds (a peer's bytes cannot forge
// a line): control characters are written as \n, \r, \t or \xNN.
void append_escaped(std::string& out, std::string_view msg) {
  for (char c : msg) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += fmt::format("\\x{:02x}", u);
    }
  }
}

const char* text_label(level l) {
  switch (l) {
  case level::trace:
    return "TRACE";
  case level::debug:
    return "DEBUG";
  case level::info:
    return "INFO ";
  case level::warn:
    return "WARN ";
  case level::error:
    return "ERROR";
  case level::off:
    break;
  }
  return "OFF  ";
}

std::string text_fields(const logger& who, level l, std::string_view request, std::string_view msg,
                        const suppressed_count* held) {
  std::string out = fmt::format("{} instance={} incarnation={} request=", text_label(l),
                                who.instance(), who.incarnation());
  append_escaped(out, request.empty() ? std::string_view("-") : request);
  out += ' ';
  append_escaped(out, msg);
  if (held) out += fmt::format(" (x {} in the last {:.1f} s)", held->count, held->window_seconds);
  return out;
}

// The JSON object's members after "time", without the braces (the pattern adds them).
std::string json_fields(const logger& who, level l, std::string_view request, std::string_view msg,
                        const suppressed_count* held) {
  nlohmann::ordered_json j;
  j["level"] = to_string(l);
  j["instance"] = who.instance();
  j["incarnation"] = who.incarnation();
  j["request"] =
      request.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(request);
  j["msg"] = msg;
  if (held) {
    j["suppressed"] = held->count;
    j["window_s"] = held->window_seconds;
  }
  // Bytes that are not UTF-8 (a peer's) become U+FFFD instead of an exception.
  auto text = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return text.substr(1, text.size() - 2);
}

} // namespace

const char* to_string(level l) {
  switch (l) {
  case level::trace:
    return "trace";
  case level::debug:
    return "debug";
  case level::info:
    return "info";
  case level::warn:
    return "warn";
  case level::error:
    return "error";
  case level::off:
    return "off";
  }
  return "?";
}

const char* to_string(format f) {
  return f == format::json ? "json" : "text";
}

std::optional<level> parse_level(std::string_view text) {
  for (auto l : {level::trace, level::debug, level::info, level::warn, level::error, level::off})
    if (text == to_string(l)) return l;
  if (text == "warning") return level::warn;
  return std::nullopt;
}

std::optional<format> parse_format(std::string_view text) {
  if (text == "text") return format::text;
  if (text == "json") return format::json;
  return std::nullopt;
}

void set_level(level l) {
  level_.store(l);
}
level current_level() {
  return level_.load(std::memory_order_relaxed);
}

void set_format(format f) {
  std::lock_guard lock(output_mutex_);
  install(f);
}
format current_format() {
  return format_.load();
}

void set_default_rate_interval(std::chrono::steady_clock::duration interval) {
  rate_interval_.store(interval.count());
}
std::chrono::steady_clock::duration default_rate_interval() {
  return std::chrono::steady_clock::duration(rate_interval_.load());
}

void configure_from_env() {
  if (const char* v = std::getenv("SUPERNODE_LOG_LEVEL"); v && *v) {
    auto l = parse_level(v);
    if (!l)
      throw std::invalid_argument(std::string("SUPERNODE_LOG_LEVEL is trace, debug, info, warn, "
                                              "error or off, not '") +
                                  v + "'");
    set_level(*l);
  }
  if (const char* v = std::getenv("SUPERNODE_LOG_FORMAT"); v && *v) {
    auto f = parse_format(v);
    if (!f)
      throw std::invalid_argument(std::string("SUPERNODE_LOG_FORMAT is text or json, not '") + v +
                                  "'");
    set_format(*f);
  }
  if (const char* v = std::getenv("SUPERNODE_LOG_RATE_INTERVAL"); v && *v) {
    char* end = nullptr;
    const double seconds = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(seconds >= 0) || seconds > 3600)
      throw std::invalid_argument(std::string("SUPERNODE_LOG_RATE_INTERVAL is seconds from 0 "
                                              "to 3600, not '") +
                                  v + "'");
    set_default_rate_interval(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(seconds)));
  }
}

void export_to_env() {
  ::setenv("SUPERNODE_LOG_LEVEL", to_string(current_level()), 1);
  ::setenv("SUPERNODE_LOG_FORMAT", to_string(current_format()), 1);
}

void redirect_for_testing(std::ostream* out) {
  std::lock_guard lock(output_mutex_);
  test_output_ = out;
  install(format_.load());
}

logger::logger() : instance_("-") {}

logger::logger(std::string instance, uint64_t incarnation)
    : instance_(instance.empty() ? "-" : std::move(instance)), incarnation_(incarnation) {}

void logger::write(level l, std::string_view msg, const suppressed_count* held,
                   std::string_view request) const {
  if (l < current_level() || l == level::off) return;
  const auto out = current_output();
  const auto fields = out->fmt == format::json ? json_fields(*this, l, request, msg, held)
                                               : text_fields(*this, l, request, msg, held);
  out->sink->log(spdlog::level::info, spdlog::string_view_t(fields));
}

const logger& process() {
  static const logger whole{"supernode", 0};
  return whole;
}

} // namespace supernode::log
