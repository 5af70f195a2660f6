// The chaos report on hand-made outcomes: a mismatch, duplicates, a failure, and latency by
// phase.

#include "services/chaos/chaos_report.hpp"
#include "services/chaos/chaos_timeline.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace chaos = supernode::services::chaos;
namespace lg = supernode::services::loadgen;

namespace {

// A request sent at `send_s` whose first token comes `ttft_s` later and the rest every
// `tpot_s`.
lg::request_outcome finished(double send_s, double ttft_s, double tpot_s,
                             std::vector<int32_t> tokens) {
  lg::request_outcome o;
  o.send_s = send_s;
  for (size_t i = 0; i < tokens.size(); ++i)
    o.token_times_s.push_back(send_s + ttft_s + static_cast<double>(i) * tpot_s);
  o.end_s = o.token_times_s.back();
  o.completion_tokens = static_cast<int64_t>(tokens.size());
  o.token_ids = std::move(tokens);
  o.ok = true;
  return o;
}

} // namespace

TEST(chaos_report, duplicated_tokens_counts_replays_and_overruns_not_divergence) {
  const std::vector<int32_t> ref{1, 2, 3, 4, 5, 6};
  EXPECT_EQ(chaos::duplicated_tokens(ref, ref), 0);
  EXPECT_EQ(chaos::duplicated_tokens({1, 2, 3}, ref), 0); // cut short: lost, not repeated
  // Resumed after 4 tokens, streaming 3 and 4 again.
  EXPECT_EQ(chaos::duplicated_tokens({1, 2, 3, 4, 3, 4, 5, 6}, ref), 2);
  // The longest replayed span counts: everything from the start again.
  EXPECT_EQ(chaos::duplicated_tokens({1, 2, 3, 1, 2, 3, 4, 5, 6}, ref), 3);
  // Broken in the middle of the replay.
  EXPECT_EQ(chaos::duplicated_tokens({1, 2, 3, 4, 2, 3}, ref), 2);
  // Past max_tokens.
  EXPECT_EQ(chaos::duplicated_tokens({1, 2, 3, 4, 5, 6, 6}, ref), 1);
  // A different token is a mismatch, and the walk stops there.
  EXPECT_EQ(chaos::duplicated_tokens({1, 2, 9, 2, 3, 4}, ref), 0);
  // A token that repeats in the reference itself is not a replay.
  EXPECT_EQ(chaos::duplicated_tokens({7, 7, 7}, {7, 7, 7}), 0);
}

TEST(chaos_report, counts_and_latency_by_phase) {
  const std::vector<int32_t> ref{10, 11, 12, 13};
  std::vector<lg::request_outcome> outcomes;
  // Before the fault (at 5 s): TTFT 100 and 200 ms, TPOT 10 ms.
  outcomes.push_back(finished(1.0, 0.1, 0.01, ref));
  outcomes.push_back(finished(2.0, 0.2, 0.01, ref));
  // During it (5 s to 8 s): one mismatch, one with a replayed token, TTFT 1 s.
  outcomes.push_back(finished(5.5, 1.0, 0.05, {10, 11, 99, 13}));
  outcomes.push_back(finished(6.0, 1.0, 0.05, {10, 11, 11, 12, 13}));
  // A failure: counted, in no phase's latency.
  lg::request_outcome failed;
  failed.send_s = 6.5;
  failed.end_s = 7.0;
  failed.error = "error event: decode-1 went down";
  failed.token_ids = {10, 11, 10, 11};
  outcomes.push_back(failed);
  // After it: TTFT 300 ms.
  outcomes.push_back(finished(9.0, 0.3, 0.02, ref));

  chaos::fault_record kill;
  kill.kind = "kill";
  kill.target = "decode-1";
  kill.at_s = 5.0;
  kill.detected_s = 5.4;
  kill.recovered_s = 8.0;
  const auto r = chaos::make_chaos_report(outcomes, std::vector(outcomes.size(), ref), {kill});
  EXPECT_EQ(r.requests, 6);
  EXPECT_EQ(r.succeeded, 5);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.mismatched, 2); // the wrong token and the repeated one
  EXPECT_EQ(r.duplicated_tokens, 1 + 2);
  EXPECT_FALSE(r.clean());
  ASSERT_EQ(r.mismatches.size(), 2u);
  EXPECT_EQ(r.mismatches[0].request, 2u);
  EXPECT_EQ(r.mismatches[0].first_diff, 2u);
  EXPECT_EQ(r.mismatches[1].first_diff, 2u);
  EXPECT_EQ(r.mismatches[1].received, 5u);

  EXPECT_EQ(r.before.requests, 2);
  EXPECT_NEAR(r.before.ttft_ms.p50, 150, 1e-9);
  EXPECT_NEAR(r.before.ttft_ms.p99, 199, 1e-9); // interpolated between 100 and 200
  EXPECT_NEAR(r.before.tpot_ms.p50, 10, 1e-9);
  EXPECT_EQ(r.during.requests, 2);
  EXPECT_NEAR(r.during.ttft_ms.p50, 1000, 1e-9);
  EXPECT_EQ(r.after.requests, 1);
  EXPECT_NEAR(r.after.ttft_ms.p99, 300, 1e-9);

  const auto j = chaos::to_json(r);
  for (const char* key : {"requests", "succeeded", "failed", "mismatched", "duplicated_tokens",
                          "faults", "ttft_ms", "tpot_ms", "failures", "mismatches"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["faults"][0]["kind"], "kill");
  EXPECT_EQ(j["faults"][0]["detected_s"], 5.4);
  EXPECT_EQ(j["faults"][0]["recovered_s"], 8.0);
  EXPECT_NEAR(j["ttft_ms"]["during"]["p50"].get<double>(), 1000, 1e-9);
  EXPECT_EQ(j["failures"][0]["reason"], "error event: decode-1 went down");

  // The timeline draws the fault and every request.
  const auto svg = chaos::render_timeline_svg(outcomes, r.faults, "t", "s");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("kill decode-1"), std::string::npos);
  EXPECT_NE(svg.find("#e63946"), std::string::npos); // the failed request's mark
}

TEST(chaos_report, a_clean_run_and_a_run_without_faults) {
  const std::vector<int32_t> ref{1, 2};
  const auto r = chaos::make_chaos_report({finished(0, 0.1, 0.01, ref)}, {ref}, {});
  EXPECT_TRUE(r.clean());
  EXPECT_EQ(r.before.requests, 1); // no fault: everything is before
  EXPECT_TRUE(chaos::to_json(r)["ttft_ms"]["during"]["p50"].is_null());
  // Finished without token ids: nothing proves it right.
  auto no_ids = finished(0, 0.1, 0.01, ref);
  no_ids.token_ids.clear();
  EXPECT_EQ(chaos::make_chaos_report({no_ids}, {ref}, {}).mismatched, 1);
}
