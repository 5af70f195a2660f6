#include "apps/bench/memory_bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace supernode::apps {

namespace {
// Sums 64-bit words with four independent accumulators; the compiler vectorizes it, so the
// loop is limited by memory, not by the adds.
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  return a + b + c + d;
}
} // namespace

double measure_read_bandwidth_gbs(int threads, int mib, int reps) {
  const size_t words = static_cast<size_t>(mib) << 17;
  std::vector<uint64_t> buf(words);
  for (size_t i = 0; i < words; ++i)
    buf[i] = i;
  double best = 0.0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<uint64_t> partial(threads);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    const size_t per = words / threads;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { partial[t] = sum_words(buf.data() + t * per, per); });
    for (auto& t : pool)
      t.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (auto p : partial)
      sink = sink + p;
    best = std::max(best, static_cast<double>(words * 8) / secs / 1e9);
  }
  return best;
}

} // namespace supernode::apps
