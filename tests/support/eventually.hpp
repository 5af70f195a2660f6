#pragma once
// For effects with no condition variable to wait on (counters, flags of another object, a
// process that is not our child): polls the condition until it holds or the deadline passes.
// Tests never sleep a fixed time instead; the pause between looks (1 ms unless a condition is
// costly to ask, such as a docker engine) only keeps the poll off a shared core.

#include "sanitizer_slowdown.hpp"

#include <chrono>
#include <functional>
#include <thread>

namespace supernode::testing {

inline bool eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds timeout = scaled(std::chrono::milliseconds(20000)),
                       std::chrono::milliseconds every = std::chrono::milliseconds(1)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
  return true;
}

} // namespace supernode::testing
