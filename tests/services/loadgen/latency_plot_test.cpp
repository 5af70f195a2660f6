#include "services/loadgen/latency_plot.hpp"

#include <gtest/gtest.h>

namespace lg = supernode::services::loadgen;

namespace {

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

} // namespace

TEST(loadgen_latency_plot, ticks_are_round_and_cover_the_range) {
  EXPECT_EQ(lg::nice_ticks(0, 97), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  const auto t = lg::nice_ticks(12.3, 13.1);
  EXPECT_LE(t.front(), 12.3);
  EXPECT_GE(t.back(), 13.1);
  EXPECT_LE(t.size(), 10u);
}

TEST(loadgen_latency_plot, four_panels_with_percentile_markers) {
  lg::latency_samples s;
  for (int i = 1; i <= 5000; ++i) s.itl_ms.push_back(i * 0.01);
  s.ttft_ms = {120, 80, 95};
  s.e2e_ms = {1000};
  const auto svg = lg::render_latency_svg(s, "run <1> & co", "subtitle");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("run &lt;1&gt; &amp; co"), std::string::npos); // text is escaped
  for (const char* panel : {"TTFT", "TPOT", "ITL", "E2E latency"})
    EXPECT_NE(svg.find(panel), std::string::npos) << panel;
  // TPOT has no samples; the three other panels mark p50, p90 and p99 once each.
  EXPECT_EQ(count_of(svg, "no samples"), 1u);
  EXPECT_EQ(count_of(svg, ">p99 "), 3u);
  // 5000 ITL samples are drawn with a bounded number of path points.
  EXPECT_LT(svg.size(), 200u * 1000u);
}
