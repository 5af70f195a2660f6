#pragma once
// A debug check that an actor thread never blocks: every role handler is timed, and one that
// runs longer than the bound is logged. With SUPERNODE_ACTOR_HANDLER_LIMIT_MS set
// (the test suite sets it), a handler that uses more than the bound of CPU time, or that takes
// more than 20 times the bound of wall time (it waited on something), aborts the process with
// the handler and instance named, so the test that drove it fails. CPU time is what a bulk copy
// or a computation costs; the wide wall-time margin keeps a loaded two-core machine, where a
// thread may simply not be scheduled, from failing tests that did nothing wrong.

#include "log/log.hpp"

#include <chrono>
#include <cstdint>

namespace supernode::actors {

class handler_watch {
public:
  handler_watch(const log::logger& instance, const char* handler);
  ~handler_watch();
  handler_watch(const handler_watch&) = delete;
  handler_watch& operator=(const handler_watch&) = delete;

private:
  const log::logger& log_;
  const char* handler_;
  std::chrono::steady_clock::time_point wall_start_;
  int64_t cpu_start_ns_;
};

} // namespace supernode::actors
