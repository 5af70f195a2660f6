// The supervisor's restart rules on a made-up clock: which exits are restarted, how the back-off
// grows and is capped, when it gives up and when a stable run forgives earlier failures.

#include "services/cluster/restart_policy.hpp"

#include <gtest/gtest.h>

using namespace supernode::services::cluster;
using supernode::transport::restart_mode;
using action = restart_decision::action;
using namespace std::chrono_literals;

namespace {

const auto t0 = restart_policy::clock::time_point{} + 1000s;

restart_rules rules(restart_mode mode, int max_restarts = 5) {
  restart_rules r;
  r.mode = mode;
  r.backoff = 200ms;
  r.backoff_max = 5000ms;
  r.window = 60s;
  r.max_restarts = max_restarts;
  return r;
}

} // namespace

TEST(restart_policy, on_failure_restarts_a_crash_but_not_a_clean_exit) {
  restart_policy p(rules(restart_mode::on_failure));
  p.started(t0);
  auto crash = p.exited(true, t0 + 1s);
  EXPECT_EQ(crash.what, action::restart);
  EXPECT_EQ(crash.at, t0 + 1s + 200ms);
  EXPECT_EQ(crash.attempt, 1);
  p.started(crash.at);
  auto clean = p.exited(false, t0 + 2s);
  EXPECT_EQ(clean.what, action::leave_stopped);
  EXPECT_NE(clean.reason.find("code 0"), std::string::npos) << clean.reason;
}

TEST(restart_policy, always_restarts_a_clean_exit_and_never_restarts_nothing) {
  restart_policy always(rules(restart_mode::always));
  always.started(t0);
  EXPECT_EQ(always.exited(false, t0 + 1s).what, action::restart);
  restart_policy never(rules(restart_mode::never));
  never.started(t0);
  EXPECT_EQ(never.exited(true, t0 + 1s).what, action::leave_stopped);
  EXPECT_EQ(never.exited(false, t0 + 2s).what, action::leave_stopped);
}

TEST(restart_policy, back_off_doubles_up_to_its_cap) {
  restart_policy p(rules(restart_mode::on_failure, 100));
  auto now = t0;
  p.started(now);
  std::vector<std::chrono::milliseconds> waits;
  for (int i = 0; i < 7; ++i) {
    now += 10ms;
    auto d = p.exited(true, now);
    ASSERT_EQ(d.what, action::restart) << i;
    EXPECT_EQ(d.attempt, i + 1);
    EXPECT_EQ(d.at, now + d.backoff);
    waits.push_back(d.backoff);
    now = d.at;
    p.started(now);
  }
  const std::vector<std::chrono::milliseconds> expected{200ms,  400ms,  800ms, 1600ms,
                                                        3200ms, 5000ms, 5000ms};
  EXPECT_EQ(waits, expected);
}

TEST(restart_policy, gives_up_after_max_restarts_failures_within_the_window) {
  restart_policy p(rules(restart_mode::on_failure, 3));
  auto now = t0;
  p.started(now);
  for (int i = 0; i < 3; ++i) {
    auto d = p.exited(true, now += 1s);
    ASSERT_EQ(d.what, action::restart) << i;
    p.started(now = d.at);
  }
  auto d = p.exited(true, now += 1s);
  EXPECT_EQ(d.what, action::give_up);
  EXPECT_EQ(d.reason, "4 exits within 60 s (max_restarts = 3)");
}

TEST(restart_policy, failures_older_than_the_window_do_not_count) {
  restart_policy p(rules(restart_mode::on_failure, 2));
  auto now = t0;
  p.started(now);
  // Two quick failures, then a third one 50 s later: the first two are still within 60 s.
  for (auto gap : {1s, 1s}) {
    auto d = p.exited(true, now += gap);
    ASSERT_EQ(d.what, action::restart);
    p.started(now = d.at);
  }
  // A run of 59 s is not stable (the window is 60 s), but the first failure leaves the window.
  now += 59s;
  auto d = p.exited(true, now);
  EXPECT_EQ(d.what, action::restart) << d.reason;
  EXPECT_EQ(d.attempt, 3) << "the back-off streak goes on: the run was not a stable one";
}

TEST(restart_policy, a_stable_run_resets_back_off_and_failure_count) {
  restart_policy p(rules(restart_mode::on_failure, 2));
  auto now = t0;
  p.started(now);
  for (int i = 0; i < 2; ++i) {
    auto d = p.exited(true, now += 1s);
    ASSERT_EQ(d.what, action::restart);
    p.started(now = d.at);
  }
  // Up for a whole window: the next crash is a first one again.
  auto d = p.exited(true, now += 60s);
  ASSERT_EQ(d.what, action::restart) << d.reason;
  EXPECT_EQ(d.attempt, 1);
  EXPECT_EQ(d.backoff, 200ms);
}

TEST(restart_policy, max_restarts_zero_gives_up_at_the_first_failure) {
  restart_policy p(rules(restart_mode::always, 0));
  p.started(t0);
  EXPECT_EQ(p.exited(false, t0 + 1s).what, action::give_up);
}
