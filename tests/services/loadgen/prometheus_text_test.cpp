// The Prometheus text reader: what the gateway's registry renders reads back as written, labels
// match as subsets, sums run over label sets, and lines that are not samples are skipped.

#include "services/gateway/metrics.hpp"
#include "services/loadgen/prometheus_text.hpp"

#include <cmath>
#include <gtest/gtest.h>

namespace lg = supernode::services::loadgen;
namespace gw = supernode::services::gateway;

TEST(prometheus_text, reads_back_what_the_gateway_renders) {
  gw::metrics_registry m;
  m.set_gauge("supernode_kv_blocks_used", "KV blocks", 7, {{"instance", "decode-0"}});
  m.set_gauge("supernode_kv_blocks_used", "KV blocks", 5, {{"instance", "decode-1"}});
  m.add_counter("supernode_requests_total", "Requests", 3,
                {{"endpoint", "/v1/completions"}, {"status", "200"}});
  const double bounds[] = {0.5, 1};
  m.observe("supernode_ttft_seconds", "TTFT", bounds, 0.25);
  const lg::metrics_snapshot s(m.render());

  EXPECT_EQ(s.value("supernode_kv_blocks_used", {{"instance", "decode-1"}}), 5.0);
  EXPECT_EQ(s.sum("supernode_kv_blocks_used"), 12.0);
  EXPECT_EQ(s.value("supernode_requests_total", {{"status", "200"}}), 3.0);
  EXPECT_EQ(s.value("supernode_ttft_seconds_bucket", {{"le", "+Inf"}}), 1.0);
  EXPECT_EQ(s.value("supernode_ttft_seconds_count"), 1.0);
  // HELP and TYPE lines are not samples.
  EXPECT_EQ(s.samples().size(), 2u + 1u + 3u + 2u);
}

TEST(prometheus_text, a_name_matches_whole_never_as_a_prefix) {
  const lg::metrics_snapshot s("supernode_cache_lookup_tokens 100\n"
                               "supernode_cache_lookups{instance=\"prefill-0\"} 2\n"
                               "supernode_cache_lookups{instance=\"prefill-1\"} 3\n");
  EXPECT_EQ(s.sum("supernode_cache_lookups"), 5.0);
  EXPECT_EQ(s.sum("supernode_cache_lookup_tokens"), 100.0);
  EXPECT_EQ(s.value("supernode_cache_lookup"), std::nullopt);
  EXPECT_EQ(s.sum("supernode_cache_lookup"), 0.0);
}

TEST(prometheus_text, labels_match_as_a_subset_and_in_any_order) {
  const lg::metrics_snapshot s(
      "stage_seconds{instance=\"decode-0\",moe_layer=\"0\",stage=\"experts\"} 1.5\n"
      "stage_seconds{instance=\"decode-0\",moe_layer=\"1\",stage=\"experts\"} 2.5\n"
      "stage_seconds{instance=\"decode-1\",moe_layer=\"0\",stage=\"attention\"} 4\n");
  EXPECT_EQ(s.value("stage_seconds", {{"stage", "experts"}, {"moe_layer", "1"}}), 2.5);
  EXPECT_EQ(s.sum("stage_seconds", {{"instance", "decode-0"}}), 4.0);
  EXPECT_EQ(s.value("stage_seconds", {{"instance", "decode-2"}}), std::nullopt);
  // A label value is matched whole: "decode-" is not "decode-0".
  EXPECT_EQ(s.sum("stage_seconds", {{"instance", "decode-"}}), 0.0);
}

TEST(prometheus_text, escaped_label_values_special_values_and_timestamps) {
  const auto samples =
      lg::parse_prometheus_text("path{p=\"a \\\"quoted\\\" \\\\ back\\nline\",} 1 1700000000000\r\n"
                                "up +Inf\n"
                                "down -Inf\n"
                                "odd NaN\n"
                                "sci 1.5e3\n");
  ASSERT_EQ(samples.size(), 5u);
  ASSERT_EQ(samples[0].labels.size(), 1u);
  EXPECT_EQ(samples[0].labels[0].second, "a \"quoted\" \\ back\nline");
  EXPECT_EQ(samples[0].value, 1.0);
  EXPECT_TRUE(std::isinf(samples[1].value) && samples[1].value > 0);
  EXPECT_TRUE(std::isinf(samples[2].value) && samples[2].value < 0);
  EXPECT_TRUE(std::isnan(samples[3].value));
  EXPECT_EQ(samples[4].value, 1500.0);
}

TEST(prometheus_text, lines_that_are_not_samples_are_skipped) {
  const auto samples = lg::parse_prometheus_text("# HELP x a counter\n"
                                                 "\n"
                                                 "x{a=\"unterminated} 1\n"
                                                 "x{a=unquoted} 1\n"
                                                 "x notanumber\n"
                                                 "x\n"
                                                 "9starts_with_a_digit 1\n"
                                                 "x{a=\"ok\"} 2");
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].name, "x");
  EXPECT_EQ(samples[0].value, 2.0);
}
