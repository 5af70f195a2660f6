#pragma once
// How much slower a sanitized build runs, for the deadlines tests wait with: ThreadSanitizer
// runs threaded code 5-15x slower, AddressSanitizer 2-3x, and two cores are shared. A deadline
// is what a test gives up at, never what it waits for, so a generous one costs nothing when the
// condition comes true.

namespace supernode::testing {

#if defined(__SANITIZE_THREAD__)
inline constexpr int sanitizer_slowdown = 10;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr int sanitizer_slowdown = 3;
#else
inline constexpr int sanitizer_slowdown = 1;
#endif

// `deadline` stretched by the build's slowdown.
template<class Duration>
constexpr Duration scaled(Duration deadline) {
  return deadline * sanitizer_slowdown;
}

} // namespace supernode::testing
