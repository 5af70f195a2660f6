// --rate-schedule: seconds:rate steps, the rate at any time, and errors that name the element.

#include "services/planner/rate_schedule.hpp"

#include <algorithm>
#include <gtest/gtest.h>

using supernode::services::planner::rate_schedule;

namespace {

std::string error_of(const char* text) {
  try {
    rate_schedule::parse(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(rate_schedule, is_a_step_function_of_time) {
  const auto r = rate_schedule::parse("0:1,60:6,180:1");
  ASSERT_EQ(r.steps().size(), 3u);
  EXPECT_EQ(r.steps()[1].from_s, 60);
  EXPECT_EQ(r.steps()[1].rate, 6);
  EXPECT_EQ(r.rate_at(-1), 1);
  EXPECT_EQ(r.rate_at(0), 1);
  EXPECT_EQ(r.rate_at(59.999), 1);
  EXPECT_EQ(r.rate_at(60), 6);
  EXPECT_EQ(r.rate_at(179.5), 6);
  EXPECT_EQ(r.rate_at(180), 1);
  EXPECT_EQ(r.rate_at(1e9), 1);
  // Fractions and a pause.
  const auto f = rate_schedule::parse("0:0.5,2.5:0,10:12.25");
  EXPECT_EQ(f.rate_at(1), 0.5);
  EXPECT_EQ(f.rate_at(2.5), 0);
  EXPECT_EQ(f.rate_at(11), 12.25);
  EXPECT_EQ(rate_schedule::parse("0:3").rate_at(100), 3);
}

TEST(rate_schedule, errors_name_the_element_and_what_is_wrong) {
  EXPECT_EQ(error_of(""),
            "--rate-schedule is empty; expected seconds:rate,... such as 0:1,60:6,180:1");
  EXPECT_EQ(error_of("0:1,60"), "--rate-schedule element 2 \"60\" is not seconds:rate");
  EXPECT_EQ(error_of("0:1,,60:2"), "--rate-schedule element 2 \"\" is not seconds:rate");
  EXPECT_EQ(error_of("0:1,60:6,"), "--rate-schedule element 3 \"\" is not seconds:rate");
  EXPECT_EQ(error_of("5:1,60:6"),
            "--rate-schedule element 1 \"5:1\": the first step must start at 0");
  EXPECT_EQ(error_of("0:1,60:6,60:2"),
            "--rate-schedule element 3 \"60:2\": times must increase strictly, and \"60:6\" is "
            "not earlier");
  EXPECT_EQ(error_of("0:1,30:2,20:3"),
            "--rate-schedule element 3 \"20:3\": times must increase strictly, and \"30:2\" is "
            "not earlier");
  EXPECT_EQ(error_of("0:1,1m:6"),
            "--rate-schedule element 2 \"1m:6\": the time must be a number of seconds >= 0");
  EXPECT_EQ(error_of("0:1,-5:6"),
            "--rate-schedule element 2 \"-5:6\": the time must be a number of seconds >= 0");
  EXPECT_EQ(error_of("0:fast"),
            "--rate-schedule element 1 \"0:fast\": the rate must be a number of requests/s >= 0");
  EXPECT_EQ(error_of("0:-1"),
            "--rate-schedule element 1 \"0:-1\": the rate must be a number of requests/s >= 0");
  EXPECT_EQ(error_of("0:inf"),
            "--rate-schedule element 1 \"0:inf\": the rate must be a number of requests/s >= 0");
  EXPECT_EQ(error_of("0:1:2"),
            "--rate-schedule element 1 \"0:1:2\": the rate must be a number of requests/s >= 0");
}

TEST(rate_schedule, draws_poisson_arrivals_step_by_step) {
  const auto r = rate_schedule::parse("0:2,100:20,200:0,300:2");
  const auto times = r.arrivals(400, 7);
  size_t per_step[4] = {};
  for (double t : times) ++per_step[static_cast<size_t>(t / 100)];
  // Expected 200, 2000, 0 and 200; a Poisson count is within a few sqrt(n) of its mean.
  EXPECT_NEAR(per_step[0], 200, 45);
  EXPECT_NEAR(per_step[1], 2000, 140);
  EXPECT_EQ(per_step[2], 0u) << "a pause sends nothing";
  EXPECT_NEAR(per_step[3], 200, 45);
  EXPECT_TRUE(std::is_sorted(times.begin(), times.end()));
  EXPECT_EQ(r.arrivals(400, 7), times) << "the same seed, the same traffic";
  EXPECT_NE(r.arrivals(400, 8), times);
  EXPECT_LT(r.arrivals(150, 7).back(), 150) << "nothing at or past the end";
}

TEST(rate_schedule, scales_its_times_for_a_shorter_run) {
  const auto r = rate_schedule::parse("0:1,60:6,180:1").scaled(0.25);
  EXPECT_EQ(r.steps()[1].from_s, 15);
  EXPECT_EQ(r.steps()[2].from_s, 45);
  EXPECT_EQ(r.rate_at(20), 6);
}
