#include "services/loadgen/workload.hpp"

#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <stdexcept>

namespace lg = supernode::services::loadgen;

namespace {

lg::workload_spec spec_with(const std::string& input, const std::string& output, double ratio) {
  lg::workload_spec s;
  s.num_prompts = 200;
  s.input = lg::parse_length_distribution(input);
  s.output = lg::parse_length_distribution(output);
  s.shared_prefix_ratio = ratio;
  s.seed = 42;
  return s;
}

} // namespace

TEST(loadgen_workload, length_specs_parse_and_reject) {
  // Happy path: the three forms round-trip through to_string.
  for (const char* spec : {"128", "uniform:64:256", "normal:128:32"})
    EXPECT_EQ(lg::to_string(lg::parse_length_distribution(spec)), spec);
  // Invalid inputs: each names what is wrong.
  for (const char* bad : {"", "0", "12.5", "uniform:9:3", "uniform:4", "normal:10:-1",
                          "poisson:3:4", "uniform:a:9", "128:"})
    EXPECT_THROW(lg::parse_length_distribution(bad), std::invalid_argument) << bad;
}

TEST(loadgen_workload, same_seed_same_traffic_other_seed_other_traffic) {
  auto spec = spec_with("uniform:8:64", "normal:32:8", 0.25);
  spec.request_rate = 5;
  const auto a = lg::make_workload(spec), b = lg::make_workload(spec);
  ASSERT_EQ(a.size(), 200u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].max_tokens, b[i].max_tokens);
    EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);
  }
  spec.seed = 43;
  const auto c = lg::make_workload(spec);
  EXPECT_NE(a[0].prompt, c[0].prompt);
}

TEST(loadgen_workload, arrival_rate_does_not_change_the_prompts) {
  // Each purpose draws from its own stream, so a rate sweep sends the same prompts.
  auto spec = spec_with("uniform:8:64", "uniform:1:9", 0.5);
  const auto closed_loop = lg::make_workload(spec);
  spec.request_rate = 3;
  const auto poisson = lg::make_workload(spec);
  for (size_t i = 0; i < closed_loop.size(); ++i) {
    EXPECT_EQ(closed_loop[i].prompt, poisson[i].prompt);
    EXPECT_EQ(closed_loop[i].max_tokens, poisson[i].max_tokens);
    EXPECT_EQ(closed_loop[i].arrival_s, 0.0);
  }
}

TEST(loadgen_workload, lengths_stay_in_their_distribution) {
  const auto fixed = lg::make_workload(spec_with("17", "5", 0));
  for (const auto& r : fixed) {
    EXPECT_EQ(r.prompt.size(), 17u);
    EXPECT_EQ(r.max_tokens, 5);
  }
  const auto uniform = lg::make_workload(spec_with("uniform:10:20", "uniform:1:3", 0));
  std::vector<int> seen(21, 0);
  for (const auto& r : uniform) {
    ASSERT_GE(r.prompt.size(), 10u);
    ASSERT_LE(r.prompt.size(), 20u);
    EXPECT_GE(r.max_tokens, 1);
    EXPECT_LE(r.max_tokens, 3);
    ++seen[r.prompt.size()];
  }
  // Both ends of the closed range occur (200 draws over 11 values).
  EXPECT_GT(seen[10], 0);
  EXPECT_GT(seen[20], 0);
  // A normal with most of its mass below 1 is clipped, never zero or negative.
  const auto normal = lg::make_workload(spec_with("normal:1:20", "normal:0:3", 0));
  int clipped = 0;
  for (const auto& r : normal) {
    EXPECT_GE(r.prompt.size(), 1u);
    EXPECT_GE(r.max_tokens, 1);
    clipped += r.max_tokens == 1;
  }
  EXPECT_GT(clipped, 50);
}

TEST(loadgen_workload, shared_prefix_is_really_shared) {
  const auto plan = lg::make_workload(spec_with("uniform:10:101", "4", 0.5));
  const auto& first = plan[0].prompt;
  size_t common_with_first_total = 0;
  for (const auto& r : plan) {
    const auto shared =
        static_cast<size_t>(std::llround(0.5 * static_cast<double>(r.prompt.size())));
    const size_t both = std::min(shared, static_cast<size_t>(std::llround(0.5 * first.size())));
    EXPECT_TRUE(std::equal(r.prompt.begin(), r.prompt.begin() + both, first.begin()));
    common_with_first_total += both;
  }
  EXPECT_GT(common_with_first_total, 0u);
  // The rest is per-prompt: two prompts of equal length differ after their shared part.
  const auto whole = lg::make_workload(spec_with("32", "4", 1.0));
  EXPECT_EQ(whole[0].prompt, whole[1].prompt);
  const auto half = lg::make_workload(spec_with("32", "4", 0.5));
  EXPECT_TRUE(
      std::equal(half[0].prompt.begin(), half[0].prompt.begin() + 16, half[1].prompt.begin()));
  EXPECT_FALSE(
      std::equal(half[0].prompt.begin() + 16, half[0].prompt.end(), half[1].prompt.begin() + 16));
  const auto none = lg::make_workload(spec_with("32", "4", 0));
  EXPECT_NE(none[0].prompt[0], none[1].prompt[0]); // 1 in ~128k to collide for this seed
}

TEST(loadgen_workload, token_ids_avoid_low_and_special_ids) {
  auto spec = spec_with("64", "4", 0.3);
  for (int64_t vocab : {129280, 1000}) {
    spec.vocab = vocab;
    const int32_t end = static_cast<int32_t>(std::min<int64_t>(vocab, lg::first_special_token));
    for (const auto& r : lg::make_workload(spec))
      for (int32_t t : r.prompt) {
        ASSERT_GE(t, lg::first_random_token);
        ASSERT_LT(t, end);
      }
  }
  spec.vocab = 100;
  EXPECT_THROW(lg::make_workload(spec), std::invalid_argument);
}

TEST(loadgen_workload, poisson_gaps_have_mean_one_over_rate) {
  auto spec = spec_with("1", "1", 0);
  spec.num_prompts = 20001;
  spec.request_rate = 8;
  const auto plan = lg::make_workload(spec);
  EXPECT_EQ(plan[0].arrival_s, 0.0); // the first request goes at once, as in vLLM
  std::vector<double> gaps;
  for (size_t i = 1; i < plan.size(); ++i) {
    ASSERT_GE(plan[i].arrival_s, plan[i - 1].arrival_s);
    gaps.push_back(plan[i].arrival_s - plan[i - 1].arrival_s);
  }
  const double n = static_cast<double>(gaps.size());
  double mean = 0, var = 0;
  for (double g : gaps) mean += g / n;
  for (double g : gaps) var += (g - mean) * (g - mean) / (n - 1);
  // An exponential's sd equals its mean 1/R: the sample mean lies within 5 standard errors
  // (1/R)/sqrt(n) of 1/R, and the sample variance near 1/R^2 (the exponential's fourth central
  // moment is 9/R^4, so var has sd sqrt(8/n)/R^2).
  const double expected = 1 / spec.request_rate;
  EXPECT_NEAR(mean, expected, 5 * expected / std::sqrt(n));
  EXPECT_NEAR(var, expected * expected, 5 * std::sqrt(8 / n) * expected * expected);
}
