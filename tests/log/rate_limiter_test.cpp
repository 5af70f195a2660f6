#include "log/rate_limiter.hpp"

#include <atomic>
#include <gtest/gtest.h>
#include <thread>
#include <vector>

namespace supernode::log {
namespace {

using namespace std::chrono_literals;

// A clock the test moves by hand.
struct manual_clock {
  rate_limiter::clock::time_point now{};
  rate_limiter::now_fn fn() {
    return [this] { return now; };
  }
};

TEST(rate_limiter, first_occurrence_is_logged_and_the_rest_of_the_interval_counted) {
  manual_clock clock;
  rate_limiter limiter(1s, clock.fn());
  // The first line of a reason goes out at once, with nothing held back.
  auto first = limiter.admit("bad frame from decode-0");
  EXPECT_TRUE(first.emit);
  EXPECT_EQ(first.suppressed, 0u);
  // Within the interval: counted, not logged.
  for (int i = 0; i < 312; ++i) {
    clock.now += 1ms;
    EXPECT_FALSE(limiter.admit("bad frame from decode-0").emit);
  }
  // The interval has passed since the last line: logged, carrying the count and the window.
  clock.now = rate_limiter::clock::time_point{} + 1500ms;
  auto next = limiter.admit("bad frame from decode-0");
  EXPECT_TRUE(next.emit);
  EXPECT_EQ(next.suppressed, 312u);
  EXPECT_EQ(next.window, 1500ms);
  // The count starts again from that line.
  clock.now += 1s;
  auto after = limiter.admit("bad frame from decode-0");
  EXPECT_TRUE(after.emit);
  EXPECT_EQ(after.suppressed, 0u);
}

TEST(rate_limiter, reasons_are_limited_independently) {
  manual_clock clock;
  rate_limiter limiter(1s, clock.fn());
  EXPECT_TRUE(limiter.admit("a").emit);
  EXPECT_TRUE(limiter.admit("b").emit);
  EXPECT_FALSE(limiter.admit("a").emit);
  EXPECT_FALSE(limiter.admit("b").emit);
  EXPECT_FALSE(limiter.admit("b").emit);
  clock.now += 1s;
  EXPECT_EQ(limiter.admit("a").suppressed, 1u);
  EXPECT_EQ(limiter.admit("b").suppressed, 2u);
}

TEST(rate_limiter, the_interval_is_configurable_and_zero_logs_everything) {
  manual_clock clock;
  rate_limiter every(0s, clock.fn());
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(every.admit("x").emit);

  rate_limiter slow(10s, clock.fn());
  EXPECT_TRUE(slow.admit("x").emit);
  clock.now += 9s;
  EXPECT_FALSE(slow.admit("x").emit);
  clock.now += 1s;
  EXPECT_EQ(slow.admit("x").suppressed, 1u);
}

TEST(rate_limiter, distinct_reasons_past_the_bound_share_one_entry) {
  manual_clock clock;
  rate_limiter limiter(1s, clock.fn());
  for (size_t i = 0; i < rate_limiter::max_reasons; ++i)
    ASSERT_TRUE(limiter.admit("peer-" + std::to_string(i)).emit);
  // The table is full of reasons still within their interval: new ones are one reason.
  EXPECT_TRUE(limiter.admit("flood-1").emit);
  EXPECT_FALSE(limiter.admit("flood-2").emit);
  EXPECT_FALSE(limiter.admit("flood-3").emit);
  // Once their interval has passed, idle reasons are forgotten and new ones get their own.
  clock.now += 1s;
  EXPECT_TRUE(limiter.admit("flood-4").emit);
  EXPECT_TRUE(limiter.admit("flood-5").emit);
}

TEST(rate_limiter, concurrent_occurrences_are_each_logged_or_counted_once) {
  // A clock that advances 1 ms per reading, shared by all threads.
  std::atomic<int64_t> ticks{0};
  rate_limiter limiter(100ms, [&] {
    return rate_limiter::clock::time_point{} + std::chrono::milliseconds(ticks.fetch_add(1));
  });
  constexpr int threads = 4, per_thread = 5000;
  std::atomic<uint64_t> lines{0}, reported{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i)
        if (auto v = limiter.admit("shared reason"); v.emit) {
          ++lines;
          reported += v.suppressed;
        }
    });
  for (auto& t : pool) t.join();
  // Flush what the last interval held back.
  ticks += 1000;
  auto last = limiter.admit("shared reason");
  ASSERT_TRUE(last.emit);
  EXPECT_EQ(lines + reported + last.suppressed, uint64_t{threads * per_thread});
  // 20000 readings 1 ms apart with a 100 ms interval: about 200 lines, far fewer than calls.
  EXPECT_GE(lines.load(), 150u);
  EXPECT_LE(lines.load(), 201u);
}

} // namespace
} // namespace supernode::log
