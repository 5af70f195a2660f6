#include "actors/role/handler_watch.hpp"

#include <cstdlib>
#include <ctime>

namespace supernode::actors {

namespace {
int64_t thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

struct bound {
  std::chrono::milliseconds limit{50};
  bool fatal = false;
};

const bound& configured() {
  static const bound b = [] {
    bound out;
    if (const char* v = std::getenv("SUPERNODE_ACTOR_HANDLER_LIMIT_MS"); v && *v) {
      const long ms = std::strtol(v, nullptr, 10);
      if (ms > 0) out = {std::chrono::milliseconds(ms), true};
    }
    return out;
  }();
  return b;
}
} // namespace

handler_watch::handler_watch(const log::logger& instance, const char* handler)
    : log_(instance), handler_(handler), wall_start_(std::chrono::steady_clock::now()),
      cpu_start_ns_(thread_cpu_ns()) {}

handler_watch::~handler_watch() {
  const auto& b = configured();
  const auto wall = std::chrono::steady_clock::now() - wall_start_;
  if (wall <= b.limit) return;
  const auto cpu = std::chrono::nanoseconds(thread_cpu_ns() - cpu_start_ns_);
  const double wall_ms = std::chrono::duration<double, std::milli>(wall).count();
  const double cpu_ms = std::chrono::duration<double, std::milli>(cpu).count();
  const bool fatal = b.fatal && (cpu > b.limit || wall > 20 * b.limit);
  log_.at(fatal ? log::level::error : log::level::warn,
          "actor handler {} ran {:.1f} ms ({:.1f} ms of CPU), over the {} ms bound{}", handler_,
          wall_ms, cpu_ms, b.limit.count(),
          fatal ? ": actor threads must not block (SUPERNODE_ACTOR_HANDLER_LIMIT_MS)" : "");
  if (fatal) std::abort();
}

} // namespace supernode::actors
