// `bench scale`'s figures from a made-up run: instance-seconds over the polled timeline, the
// time bins of the timeline plot, SLO attainment with failures counted as misses, and the
// scale events' durations (apps/bench/scale_bench_report.cpp, compiled in: apps is no library).

#include "apps/bench/scale_bench_report.hpp"

#include <gtest/gtest.h>

namespace supernode::apps {
namespace {

services::loadgen::request_outcome served(double send, double first, double last, int tokens) {
  services::loadgen::request_outcome r;
  r.ok = true;
  r.http_status = 200;
  r.send_s = send;
  for (int i = 0; i < tokens; ++i)
    r.token_times_s.push_back(first + (last - first) * i / std::max(1, tokens - 1));
  r.end_s = last;
  r.completion_tokens = tokens;
  return r;
}

scale_run_result made_up_run() {
  scale_run_result run;
  run.name = "planner";
  run.duration_s = 10;
  // 1P1D for 4 s, a decode instance starting at 4 s, 1P2D until the end.
  run.timeline = {{0, 1, 1, 1, 1}, {4, 1, 2, 1, 1}, {5, 1, 2, 1, 2}};
  run.outcomes = {served(0.5, 0.6, 1.5, 10),  // TTFT 100 ms, TPOT 100 ms
                  served(6.0, 6.05, 6.5, 10), // TTFT 50 ms, TPOT 50 ms
                  served(7.0, 7.9, 8.8, 10)}; // TTFT 900 ms: misses
  services::loadgen::request_outcome failed;
  failed.error = "HTTP 500";
  run.outcomes.push_back(failed);
  run.events = {{"decode-1", "decode", true, 4.0, 4.8, 5.25, {}, ""},
                {"decode-1", "decode", false, 9.0, {}, {}, 9.5, ""}};
  return run;
}

TEST(scale_bench_report, integrates_instances_over_the_timeline_to_the_end_of_the_run) {
  EXPECT_DOUBLE_EQ(instance_seconds(made_up_run()), 4 * 2 + 6 * 3);
}

TEST(scale_bench_report, bins_latencies_by_end_and_tokens_by_arrival) {
  const auto bins = bin_run(made_up_run(), 5);
  ASSERT_EQ(bins.size(), 2u);
  EXPECT_DOUBLE_EQ(bins[0].output_tokens_per_s, 10 / 5.0);
  EXPECT_DOUBLE_EQ(bins[1].output_tokens_per_s, 20 / 5.0);
  EXPECT_NEAR(*bins[0].ttft_p90_ms, 100, 1e-6);
  EXPECT_NEAR(*bins[1].ttft_p90_ms, 50 + 0.9 * (900 - 50), 1e-6); // numpy's interpolation
}

TEST(scale_bench_report, counts_attainment_over_every_request_and_times_each_event) {
  services::loadgen::slo_targets slo{200.0, 120.0, {}};
  const auto j = summarize_run(made_up_run(), slo, 5);
  EXPECT_EQ(j["requests"], 4);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_DOUBLE_EQ(j["slo_attainment"].get<double>(), 0.5) << "two of four, the failed one missed";
  ASSERT_EQ(j["events"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["events"][0]["to_ready_s"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(j["events"][0]["to_first_served_s"].get<double>(), 1.25);
  EXPECT_EQ(j["events"][1]["kind"], "drain");
  EXPECT_DOUBLE_EQ(j["events"][1]["drain_s"].get<double>(), 0.5);
}

} // namespace
} // namespace supernode::apps

namespace supernode::apps {
namespace {

TEST(scale_script, parses_times_counts_and_modes_and_refuses_naming_the_bad_part) {
  const auto s =
      parse_scale_script("20:decode=4;40:decode=1@migrate;60:prefill=1,decode=3@switch", 0.5);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].at_s, 10);
  EXPECT_EQ(s[0].counts, (std::map<std::string, int>{{"decode", 4}}));
  EXPECT_EQ(s[1].drain, "migrate");
  EXPECT_FALSE(s[1].switch_roles);
  EXPECT_TRUE(s[2].switch_roles);
  EXPECT_EQ(s[2].counts, (std::map<std::string, int>{{"decode", 3}, {"prefill", 1}}));
  EXPECT_EQ(s[2].text, "60:prefill=1,decode=3@switch");
  for (const char* bad : {"", "decode=2", "x:decode=2", "10:decode", "10:decode=-1",
                          "10:decode=2@later", "20:decode=2;10:decode=1"})
    EXPECT_THROW(parse_scale_script(bad), std::invalid_argument) << bad;
}

TEST(scale_script, a_group_pause_is_the_spread_of_its_ranks_switches_plus_the_longest_pause) {
  const std::string rank0 =
      "2026-12-02T00:58:25.992Z INFO  instance=decode-0 incarnation=1 request=- expert "
      "parallelism: decode-ep0 re-formed over 2 of 4 ranks (epoch aaaa), serving again 13 ms "
      "after it stopped\n"
      "2026-12-02T00:58:33.869Z INFO  instance=decode-0 incarnation=1 request=- expert "
      "parallelism: decode-ep0 re-formed over 4 of 4 ranks (epoch bbbb), serving again 0 ms "
      "after it stopped\n";
  const std::string rank1 =
      "2026-12-02T00:58:26.000Z INFO  instance=decode-1 incarnation=2 request=- expert "
      "parallelism: decode-ep0 re-formed over 2 of 4 ranks (epoch aaaa), serving again 21 ms "
      "after it stopped\n"
      "2026-12-02T00:58:33.851Z INFO  instance=decode-1 incarnation=2 request=- expert "
      "parallelism: decode-ep0 re-formed over 4 of 4 ranks (epoch bbbb), serving again 0 ms "
      "after it stopped\n"
      "2026-12-02T00:58:34.000Z INFO  instance=decode-1 incarnation=2 request=- unrelated\n";
  // 2026-12-02T00:58:20Z as unix seconds: the lines are 5.992 s and more into the run.
  const double t0 = 1796173100.0;
  const auto reforms = ep_reforms_in({rank0, rank1}, t0);
  ASSERT_EQ(reforms.size(), 2u);
  EXPECT_EQ(reforms[0].epoch, "aaaa");
  EXPECT_EQ(reforms[0].group, "decode-ep0");
  EXPECT_EQ(reforms[0].ranks, "2 of 4 ranks");
  EXPECT_EQ(reforms[0].lines, 2);
  EXPECT_NEAR(reforms[0].first_s, 5.992, 1e-6);
  EXPECT_EQ(reforms[0].pause_ms(), 8 + 21);
  EXPECT_EQ(reforms[1].pause_ms(), 18);
  EXPECT_TRUE(ep_reforms_in({rank0, rank1}, t0 + 100).empty())
      << "lines before the run do not count";
}

} // namespace
} // namespace supernode::apps
