// One API key's limits with the time passed in: concurrency slots and the sliding 60 s token
// window, and the Retry-After each refusal gives.

#include "services/gateway/key_limiter.hpp"

#include <gtest/gtest.h>

using namespace supernode::services;
using namespace supernode::services::gateway;
using namespace std::chrono_literals;

TEST(key_limiter, max_concurrent_refuses_until_a_request_ends) {
  key_limiter limiter({.max_concurrent = 2});
  const auto t0 = key_limiter::clock::now();
  key_limiter::lease a, b, c;
  EXPECT_FALSE(limiter.try_acquire(10, a, t0));
  EXPECT_FALSE(limiter.try_acquire(10, b, t0));
  auto refused = limiter.try_acquire(10, c, t0);
  ASSERT_TRUE(refused);
  EXPECT_TRUE(refused->why.is(protocol::serving_errc::key_concurrency_limit));
  EXPECT_EQ(refused->retry_after_seconds, 1); // no history yet
  EXPECT_FALSE(c);
  a.end(5, t0 + 10s); // both took 10 s: the next estimate says so
  EXPECT_EQ(limiter.in_flight(), 1u);
  b.end(5, t0 + 10s);
  key_limiter::lease d, e;
  EXPECT_FALSE(limiter.try_acquire(10, d, t0 + 10s));
  EXPECT_FALSE(limiter.try_acquire(10, e, t0 + 10s));
  refused = limiter.try_acquire(10, c, t0 + 12s);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->retry_after_seconds, 8); // d is 2 s old, requests take ~10 s
  // Past the mean the estimate is a second, not a negative or zero wait.
  refused = limiter.try_acquire(10, c, t0 + 30s);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->retry_after_seconds, 1);
}

TEST(key_limiter, tokens_per_minute_is_a_sliding_window_of_charges) {
  key_limiter limiter({.tokens_per_minute = 100});
  const auto t0 = key_limiter::clock::now();
  {
    key_limiter::lease a;
    EXPECT_FALSE(limiter.try_acquire(30, a, t0)); // prompt charged at admission
    a.end(50, t0 + 5s);                           // generated tokens when it ends
  }
  EXPECT_EQ(limiter.tokens_in_window(t0 + 5s), 80);
  key_limiter::lease b;
  EXPECT_FALSE(limiter.try_acquire(40, b, t0 + 10s)); // 80 < 100: admitted, the window holds 120
  b.end(0, t0 + 10s);
  key_limiter::lease c;
  auto refused = limiter.try_acquire(1, c, t0 + 20s);
  ASSERT_TRUE(refused);
  EXPECT_TRUE(refused->why.is(protocol::serving_errc::key_token_rate_limit));
  // 120 in the window; when the 30 of t0 age out (t0 + 60 s) 90 remain, below 100: in 40 s.
  EXPECT_EQ(refused->retry_after_seconds, 40);
  EXPECT_TRUE(limiter.try_acquire(1, c, t0 + 59s));
  EXPECT_FALSE(limiter.try_acquire(1, c, t0 + 60s));
  EXPECT_EQ(limiter.tokens_in_window(t0 + 60s), 91);
}

TEST(key_limiter, a_refunded_request_leaves_no_charge_behind) {
  key_limiter limiter({.max_concurrent = 1, .tokens_per_minute = 100});
  const auto t0 = key_limiter::clock::now();
  key_limiter::lease kept, refunded;
  EXPECT_FALSE(limiter.try_acquire(30, kept, t0));
  kept.end(0, t0);
  EXPECT_FALSE(limiter.try_acquire(60, refunded, t0 + 1s));
  EXPECT_EQ(limiter.tokens_in_window(t0 + 1s), 90);
  refunded.refund(); // refused further on: neither its slot nor its prompt count
  EXPECT_EQ(limiter.in_flight(), 0u);
  EXPECT_EQ(limiter.tokens_in_window(t0 + 1s), 30);
}

TEST(key_limiter, a_lease_destroyed_unended_gives_its_slot_back) {
  key_limiter limiter({.max_concurrent = 1});
  {
    key_limiter::lease a;
    EXPECT_FALSE(limiter.try_acquire(1, a));
    EXPECT_EQ(limiter.in_flight(), 1u);
  }
  EXPECT_EQ(limiter.in_flight(), 0u);
}
