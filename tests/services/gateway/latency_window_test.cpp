// The gateway's recent latencies: p90 over a window, old entries dropped.

#include "services/gateway/latency_window.hpp"

#include <gtest/gtest.h>

namespace supernode::services::gateway {
namespace {

using namespace std::chrono_literals;

TEST(latency_window, gives_the_nearest_rank_p90_of_what_was_measured_since) {
  latency_window w;
  const auto t0 = latency_window::clock::now();
  EXPECT_FALSE(w.p90_since(t0).ttft_ms) << "nothing measured";
  for (int i = 1; i <= 20; ++i) w.add_ttft(t0 + i * 10ms, i); // 1 ... 20 ms
  w.add_tpot(t0 + 5ms, 7);
  EXPECT_EQ(w.p90_since(t0).ttft_ms, 18.0); // rank ceil(0.9 * 20) = 18
  EXPECT_EQ(w.p90_since(t0 + 110ms).ttft_ms, 19.0) << "11 ... 20: rank 9 of 10";
  EXPECT_EQ(w.p90_since(t0).tpot_ms, 7.0);
  EXPECT_FALSE(w.p90_since(t0 + 6ms).tpot_ms) << "before the window";
}

TEST(latency_window, forgets_what_is_older_than_it_keeps) {
  latency_window w(1000ms, 3);
  const auto t0 = latency_window::clock::now();
  w.add_ttft(t0, 500);
  w.add_ttft(t0 + 2000ms, 1); // t0 is now more than a second old
  EXPECT_EQ(w.p90_since(t0 - 1h).ttft_ms, 1.0);
  for (int i = 0; i < 5; ++i) w.add_ttft(t0 + 2001ms, 2);
  EXPECT_EQ(w.p90_since(t0 - 1h).ttft_ms, 2.0) << "at most 3 kept: the 1 ms went first";
}

} // namespace
} // namespace supernode::services::gateway
