#include "services/loadgen/report.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace lg = supernode::services::loadgen;

namespace {

lg::request_outcome ok_request(int64_t prompt, double send, std::vector<double> tokens, double end,
                               int64_t completion_tokens) {
  lg::request_outcome r;
  r.prompt_tokens = prompt;
  r.send_s = send;
  r.token_times_s = std::move(tokens);
  r.end_s = end;
  r.completion_tokens = completion_tokens;
  r.http_status = 200;
  r.ok = true;
  return r;
}

lg::request_outcome failed_request(std::string why) {
  lg::request_outcome r;
  r.error = std::move(why);
  return r;
}

// Request A: sent at 1.0 s, tokens at 1.1, 1.15, 1.3, done at 1.3: TTFT 100 ms, E2E 300 ms,
// TPOT (300 - 100) / 2 = 100 ms, ITLs 50 and 150 ms. Request B: one token at 0.55 after a send
// at 0.5, done at 0.6: TTFT 50, E2E 100, no TPOT, no ITL.
std::vector<lg::request_outcome> two_ok_one_failed() {
  return {ok_request(10, 1.0, {1.1, 1.15, 1.3}, 1.3, 3), ok_request(20, 0.5, {0.55}, 0.6, 1),
          failed_request("HTTP 429: overloaded")};
}

} // namespace

TEST(loadgen_report, percentile_interpolates_between_closest_ranks_like_numpy) {
  const std::vector<double> four{1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(lg::percentile(four, 0), 1);
  EXPECT_DOUBLE_EQ(lg::percentile(four, 50), 2.5);  // rank 1.5
  EXPECT_DOUBLE_EQ(lg::percentile(four, 90), 3.7);  // rank 2.7
  EXPECT_DOUBLE_EQ(lg::percentile(four, 99), 3.97); // rank 2.97
  EXPECT_DOUBLE_EQ(lg::percentile(four, 100), 4);
  // numpy.percentile([15, 20, 35, 40, 50], [40, 90]) == [29, 46]
  const std::vector<double> five{15, 20, 35, 40, 50};
  EXPECT_DOUBLE_EQ(lg::percentile(five, 40), 29);
  EXPECT_DOUBLE_EQ(lg::percentile(five, 90), 46);
  EXPECT_DOUBLE_EQ(lg::percentile({7}, 99), 7);
}

TEST(loadgen_report, summary_sorts_its_input) {
  const auto s = lg::summarize({40, 15, 50, 35, 20});
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.mean, 32);
  EXPECT_DOUBLE_EQ(s.min, 15);
  EXPECT_DOUBLE_EQ(s.max, 50);
  EXPECT_DOUBLE_EQ(s.p50, 35);
  EXPECT_DOUBLE_EQ(s.p90, 46);
  EXPECT_DOUBLE_EQ(s.p99, 49.6); // rank 3.96: 40 + 0.96 * 10
  EXPECT_EQ(lg::summarize({}).count, 0u);
}

TEST(loadgen_report, per_request_metrics_follow_vllm_definitions) {
  const auto rs = two_ok_one_failed();
  const auto a = lg::metrics_of(rs[0]);
  ASSERT_TRUE(a.ttft_ms && a.tpot_ms);
  EXPECT_NEAR(*a.ttft_ms, 100, 1e-9);
  EXPECT_NEAR(*a.tpot_ms, 100, 1e-9);
  EXPECT_NEAR(a.e2e_ms, 300, 1e-9);
  const auto b = lg::metrics_of(rs[1]);
  EXPECT_NEAR(*b.ttft_ms, 50, 1e-9);
  EXPECT_FALSE(b.tpot_ms);

  const auto samples = lg::collect_latencies(rs);
  ASSERT_EQ(samples.itl_ms.size(), 2u);
  EXPECT_NEAR(samples.itl_ms[0], 50, 1e-9);
  EXPECT_NEAR(samples.itl_ms[1], 150, 1e-9);
  EXPECT_EQ(samples.ttft_ms.size(), 2u);
  EXPECT_EQ(samples.tpot_ms.size(), 1u);
  EXPECT_EQ(samples.e2e_ms.size(), 2u); // the failed request has no latency
}

TEST(loadgen_report, throughputs_divide_by_the_run_duration) {
  const auto r = lg::make_report(two_ok_one_failed(), 2.0, {});
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.total_input_tokens, 30);
  EXPECT_EQ(r.total_output_tokens, 4);
  EXPECT_DOUBLE_EQ(r.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(r.output_throughput, 2.0);
  EXPECT_DOUBLE_EQ(r.total_token_throughput, 17.0);
  EXPECT_FALSE(r.goodput); // no SLO given
  EXPECT_NEAR(r.ttft_ms.mean, 75, 1e-9);
  EXPECT_NEAR(r.e2e_ms.p50, 200, 1e-9);
}

TEST(loadgen_report, goodput_counts_requests_meeting_every_given_slo) {
  const auto rs = two_ok_one_failed();
  auto goodput = [&](lg::slo_targets slo) { return *lg::make_report(rs, 2.0, slo).goodput; };
  // TTFT <= 80: only B (50 ms) qualifies.
  EXPECT_DOUBLE_EQ(goodput({80.0, std::nullopt, std::nullopt}), 0.5);
  // TPOT <= 100: A exactly at the limit; B has no TPOT and meets it.
  EXPECT_DOUBLE_EQ(goodput({std::nullopt, 100.0, std::nullopt}), 1.0);
  EXPECT_DOUBLE_EQ(goodput({std::nullopt, 99.0, std::nullopt}), 0.5);
  // All given SLOs must hold at once; the failed request never counts.
  EXPECT_DOUBLE_EQ(goodput({120.0, 100.0, 250.0}), 0.5);
  EXPECT_DOUBLE_EQ(goodput({10.0, 100.0, std::nullopt}), 0.0);
  // A request that produced no token misses any TTFT target.
  lg::request_metrics no_token;
  EXPECT_FALSE(lg::meets_slos(no_token, {1e9, std::nullopt, std::nullopt}));
}

TEST(loadgen_report, failures_are_grouped_by_reason_in_order_of_appearance) {
  std::vector<lg::request_outcome> rs{failed_request("a"), failed_request("b"), failed_request("a"),
                                      failed_request("c"), failed_request("d")};
  const auto r = lg::make_report(rs, 1.0, {}, 3);
  EXPECT_EQ(r.failed, 5);
  ASSERT_EQ(r.failures.size(), 3u);
  EXPECT_EQ(r.failures[0].reason, "a");
  EXPECT_EQ(r.failures[0].count, 2);
  EXPECT_EQ(r.failures[2].reason, "c");
  // Nothing completed: throughputs are zero and the latency summaries empty, not NaN.
  EXPECT_EQ(r.request_throughput, 0);
  EXPECT_EQ(r.ttft_ms.count, 0u);
}

TEST(loadgen_report, json_has_every_field) {
  const auto j = lg::to_json(lg::make_report(two_ok_one_failed(), 2.0, {80.0, {}, {}}));
  for (const char* key :
       {"completed", "failed", "duration_s", "total_input_tokens", "total_output_tokens",
        "request_throughput", "output_throughput", "total_token_throughput", "goodput",
        "good_requests", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "failures"})
    EXPECT_TRUE(j.contains(key)) << key;
  for (const char* key : {"count", "mean", "min", "p50", "p90", "p99", "max"})
    EXPECT_TRUE(j["itl_ms"].contains(key)) << key;
  EXPECT_EQ(j["goodput"], 0.5);
  EXPECT_EQ(j["failures"][0]["reason"], "HTTP 429: overloaded");
  // An empty distribution has nulls, not zeros that would read as measured.
  const auto empty = lg::to_json(lg::summarize({}));
  EXPECT_TRUE(empty["p50"].is_null());
  EXPECT_TRUE(lg::to_json(lg::make_report({}, 1.0, {}))["goodput"].is_null());
}
