// EPLB: placement serialisation, the planner's invariants, and that planning actually lowers the
// most loaded rank's share under skewed routing, measured through route() as the runtime does.

#include "services/moe/eplb_planner.hpp"
#include "services/moe/expert_placement.hpp"
#include "services/moe/skewed_routing.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <gtest/gtest.h>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

using namespace supernode::services;

namespace {

void expect_invalid(const std::function<void()>& action, const std::string& names) {
  try {
    action();
    ADD_FAILURE() << "no exception, expected one naming '" << names << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos)
        << "'" << e.what() << "' does not name '" << names << "'";
  }
}

// Column sums of row-major [sources][experts].
std::vector<uint64_t> expert_totals(const std::vector<uint64_t>& counts, int32_t experts) {
  std::vector<uint64_t> total(experts, 0);
  for (size_t i = 0; i < counts.size(); ++i) total[i % experts] += counts[i];
  return total;
}

int64_t replica_total(const expert_placement& p) {
  int64_t n = 0;
  for (int32_t r = 0; r < p.ranks(); ++r) n += static_cast<int64_t>(p.experts_on(r).size());
  return n;
}

// The planner's contract, checked from the hosted lists rather than trusted to from_hosted.
void expect_valid_plan(const expert_placement& p, int32_t experts, int32_t ranks,
                       int32_t redundant_per_rank) {
  ASSERT_EQ(p.experts(), experts);
  ASSERT_EQ(p.ranks(), ranks);
  const int32_t cap = std::min(experts, (experts + ranks - 1) / ranks + redundant_per_rank);
  std::vector<int32_t> copies(experts, 0);
  for (int32_t r = 0; r < ranks; ++r) {
    const auto& hosted = p.experts_on(r);
    EXPECT_LE(static_cast<int32_t>(hosted.size()), cap) << "rank " << r;
    EXPECT_EQ(std::set<int32_t>(hosted.begin(), hosted.end()).size(), hosted.size())
        << "rank " << r << " hosts an expert twice";
    for (int32_t e : hosted) ++copies[e];
  }
  for (int32_t e = 0; e < experts; ++e) EXPECT_GE(copies[e], 1) << "expert " << e;
  const int64_t redundant =
      std::min<int64_t>(int64_t{ranks} * redundant_per_rank, int64_t{experts} * (ranks - 1));
  EXPECT_EQ(replica_total(p), experts + redundant);
}

} // namespace

TEST(expert_placement_words, round_trip_keeps_hosting_and_routing) {
  auto p = expert_placement::from_hosted(5, {{4, 0, 2}, {1, 4}, {3, 4, 0}});
  EXPECT_EQ(p.to_words(), (std::vector<int32_t>{5, 3, 3, 4, 0, 2, 2, 1, 4, 3, 3, 4, 0}));
  EXPECT_EQ(p.replicas(4), (std::vector<expert_slot>{{0, 0}, {1, 1}, {2, 1}}));
  const auto words = p.to_words();
  auto back = expert_placement::from_words(words);
  EXPECT_EQ(back, p);
  for (int32_t e = 0; e < p.experts(); ++e)
    for (int32_t source = 0; source < 6; ++source)
      EXPECT_EQ(back.route(e, source), p.route(e, source)) << e << " from " << source;

  auto uniform = expert_placement::uniform(10, 4);
  EXPECT_EQ(expert_placement::from_words(uniform.to_words()), uniform);
  EXPECT_FALSE(uniform == p);
  auto grown = uniform;
  grown.add_replica(9, 0);
  EXPECT_FALSE(grown == uniform);
  EXPECT_EQ(expert_placement::from_words(grown.to_words()), grown);
}

TEST(expert_placement_words, from_hosted_rejects_bad_hosting) {
  expect_invalid([] { expert_placement::from_hosted(3, {{0, 1, 0}, {2}}); }, "twice");
  expect_invalid([] { expert_placement::from_hosted(3, {{0, 1}, {3}}); }, "out of range");
  expect_invalid([] { expert_placement::from_hosted(3, {{0, -1}, {2}}); }, "out of range");
  expect_invalid([] { expert_placement::from_hosted(3, {{0}, {2}}); }, "expert 1 has no replica");
  expect_invalid([] { expert_placement::from_hosted(3, {}); }, "at least one");
  expect_invalid([] { expert_placement::from_hosted(0, {{}}); }, "at least one");
  // A rank may host nothing.
  EXPECT_EQ(expert_placement::from_hosted(2, {{0, 1}, {}}).experts_on(1).size(), 0u);
}

TEST(expert_placement_words, from_words_names_each_malformation) {
  using words = std::vector<int32_t>;
  const std::vector<std::pair<words, std::string>> cases = {
      {{}, "truncated"},
      {{3}, "truncated"},
      {{0, 1, 0}, "bad expert count"},
      {{3, 0}, "bad rank count"},
      {{3, -2}, "bad rank count"},
      {{3, 1000}, "truncated"},       // more ranks than words: caught before allocating
      {{3, 2, 1, 0, 2}, "truncated"}, // the second rank lists 2 ids, none follow
      {{3, 2, 1, 0}, "truncated"},    // no count word for the second rank
      {{3, 1, -1}, "bad count"},
      {{3, 1, 4, 0, 1, 2, 2}, "bad count"},
      {{3, 1, 3, 0, 1, 5}, "out of range"},
      {{3, 1, 3, 0, 1, 2, 7}, "trailing"},
      {{3, 2, 2, 0, 0, 1, 2}, "twice"},
      {{3, 2, 1, 0, 1, 2}, "expert 1 has no replica"},
  };
  for (auto& [w, names] : cases) {
    SCOPED_TRACE(::testing::PrintToString(w));
    expect_invalid([&] { expert_placement::from_words(w); }, names);
  }
  EXPECT_EQ(expert_placement::from_words(words{3, 2, 2, 0, 1, 1, 2}).experts_on(1),
            (std::vector<int32_t>{2}));
}

TEST(eplb_planner, plans_respect_slots_and_distinct_ranks) {
  for (int32_t experts : {1, 7, 10, 64}) {
    for (int32_t ranks : {1, 3, 4, 8}) {
      if (ranks > experts) continue;
      const auto skewed =
          expert_totals(count_by_source(skewed_routing(experts, std::min(experts, 4), 500, 1.5, 7),
                                        4, experts, 1),
                        experts);
      const std::vector<uint64_t> zero(experts, 0);
      std::vector<uint64_t> one_hot(experts, 0);
      one_hot[experts - 1] = 1'000'000;
      for (const auto* load : {&skewed, &zero, &std::as_const(one_hot)})
        for (int32_t redundant : {0, 1, 2, 5}) {
          SCOPED_TRACE(std::to_string(experts) + " experts, " + std::to_string(ranks) + " ranks, " +
                       std::to_string(redundant) + " redundant per rank");
          expect_valid_plan(plan_placement(*load, ranks, {redundant}), experts, ranks, redundant);
        }
    }
  }
}

TEST(eplb_planner, hot_expert_is_copied_to_every_rank_first) {
  std::vector<uint64_t> load(16, 10);
  load[5] = 10'000;
  const auto p = plan_placement(load, 4, {1});
  // 4 redundant replicas: 3 put the hot expert on every rank, the last goes to the lowest of the
  // tied cold experts.
  std::vector<size_t> copies;
  for (int32_t e = 0; e < 16; ++e) copies.push_back(p.replicas(e).size());
  std::vector<size_t> expected(16, 1);
  expected[5] = 4;
  expected[0] = 2;
  EXPECT_EQ(copies, expected);
}

TEST(eplb_planner, zero_load_spreads_experts_evenly) {
  const std::vector<uint64_t> idle(10, 0);
  const auto p = plan_placement(idle, 4, {0});
  std::vector<size_t> per_rank;
  for (int32_t r = 0; r < 4; ++r) per_rank.push_back(p.experts_on(r).size());
  EXPECT_EQ(per_rank, (std::vector<size_t>{3, 3, 2, 2}));
  expect_valid_plan(plan_placement(idle, 4, {1}), 10, 4, 1);
}

TEST(eplb_planner, rejects_bad_arguments) {
  std::vector<uint64_t> load(8, 1);
  expect_invalid([&] { plan_placement(load, 0, {}); }, "ranks");
  expect_invalid([&] { plan_placement(load, 9, {}); }, "ranks");
  expect_invalid([&] { plan_placement({}, 1, {}); }, "ranks");
  expect_invalid([&] { plan_placement(load, 4, {-1}); }, "redundant_per_rank");
  auto p = expert_placement::uniform(8, 4);
  expect_invalid([&] { rank_loads(p, load, 2); }, "[sources][experts]");
  expect_invalid([&] { rank_loads(p, load, 0); }, "[sources][experts]");
}

TEST(eplb_planner, rank_loads_follow_route) {
  // Expert 1 on ranks 0 and 1: source 0 and 1 stay local, sources 2 and 3 go to replicas[0] and
  // replicas[1] (2 % 2, 3 % 2).
  auto p = expert_placement::from_hosted(2, {{0, 1}, {1}});
  const std::vector<uint64_t> counts = {
      1, 10, // source 0
      2, 20, // source 1
      4, 40, // source 2
      8, 80, // source 3
  };
  EXPECT_EQ(rank_loads(p, counts, 4), (std::vector<uint64_t>{1 + 2 + 4 + 8 + 10 + 40, 20 + 80}));
  const auto b = balance_of(std::vector<uint64_t>{30, 10});
  EXPECT_DOUBLE_EQ(b.max_load, 30);
  EXPECT_DOUBLE_EQ(b.mean_load, 20);
  EXPECT_DOUBLE_EQ(b.ratio, 1.5);
  EXPECT_DOUBLE_EQ(balance_of(std::vector<uint64_t>{0, 0}).ratio, 1.0);
}

TEST(eplb_planner, lowers_the_hottest_rank_under_zipf_routing) {
  constexpr int32_t experts = 64, topk = 8, ranks = 8;
  const auto routing = skewed_routing(experts, topk, 4096, 1.2, 42);
  const auto counts = count_by_source(routing, topk, experts, ranks);
  const auto load = expert_totals(counts, experts);
  auto ratio = [&](const expert_placement& p) {
    return balance_of(rank_loads(p, counts, ranks)).ratio;
  };

  const double uniform = ratio(expert_placement::uniform(experts, ranks));
  const double rearranged = ratio(plan_placement(load, ranks, {0}));
  const double redundant = ratio(plan_placement(load, ranks, {1}));
  std::printf("zipf 1.2, 64 experts, top-8, 8 ranks, 4096 tokens: max/mean rank load "
              "uniform %.3f, planned 0 redundant/rank %.3f, 1 redundant/rank %.3f\n",
              uniform, rearranged, redundant);
  EXPECT_LE(rearranged, uniform);
  EXPECT_LT(redundant, uniform);
  EXPECT_LT(redundant, rearranged); // replicas split the hot experts no rearranging can
  EXPECT_GE(redundant, 1.0);
}

TEST(eplb_planner, uniform_load_stays_balanced) {
  constexpr int32_t experts = 64, ranks = 8;
  const std::vector<uint64_t> counts(static_cast<size_t>(ranks) * experts, 100);
  const auto load = expert_totals(counts, experts);
  for (int32_t redundant : {0, 1}) {
    const double r =
        balance_of(rank_loads(plan_placement(load, ranks, {redundant}), counts, ranks)).ratio;
    std::printf("uniform load, %d redundant/rank: max/mean %.3f\n", redundant, r);
    EXPECT_NEAR(r, 1.0, 0.05) << redundant << " redundant per rank";
  }
}

TEST(eplb_planner, is_deterministic) {
  const auto routing = skewed_routing(64, 8, 2048, 1.0, 9);
  const auto load = expert_totals(count_by_source(routing, 8, 64, 1), 64);
  const auto a = plan_placement(load, 8, {2});
  const auto b = plan_placement(load, 8, {2});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.to_words(), b.to_words());
}

TEST(skewed_routing, tokens_pick_distinct_experts) {
  for (double s : {0.0, 1.2, 4.0})
    for (int32_t topk : {1, 8, 16}) {
      const auto routing = skewed_routing(16, topk, 300, s, 3);
      ASSERT_EQ(routing.size(), 300u * topk);
      for (size_t t = 0; t < 300; ++t) {
        const std::set<int32_t> ids(routing.begin() + t * topk, routing.begin() + (t + 1) * topk);
        ASSERT_EQ(ids.size(), static_cast<size_t>(topk)) << "token " << t << ", s " << s;
        ASSERT_GE(*ids.begin(), 0);
        ASSERT_LT(*ids.rbegin(), 16);
      }
    }
  expect_invalid([] { skewed_routing(8, 9, 1, 1.0, 0); }, "topk");
  expect_invalid([] { skewed_routing(8, 2, 1, -1.0, 0); }, "zipf_s");
}

TEST(skewed_routing, same_seed_same_routing) {
  EXPECT_EQ(skewed_routing(64, 8, 500, 1.2, 11), skewed_routing(64, 8, 500, 1.2, 11));
  EXPECT_NE(skewed_routing(64, 8, 500, 1.2, 11), skewed_routing(64, 8, 500, 1.2, 12));
  // The hot experts move with the seed.
  std::set<int32_t> hottest;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const auto load =
        expert_totals(count_by_source(skewed_routing(64, 8, 500, 1.2, seed), 8, 64, 1), 64);
    hottest.insert(static_cast<int32_t>(std::max_element(load.begin(), load.end()) - load.begin()));
  }
  EXPECT_GE(hottest.size(), 4u);
}

TEST(skewed_routing, zipf_exponent_controls_concentration) {
  constexpr int32_t experts = 64, topk = 8;
  constexpr int64_t tokens = 4096;
  auto shares = [&](double s) {
    const auto load = expert_totals(
        count_by_source(skewed_routing(experts, topk, tokens, s, 5), topk, experts, 1), experts);
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    return std::pair{static_cast<double>(*lo) / tokens, static_cast<double>(*hi) / tokens};
  };
  // Share of tokens that pick an expert; uniform expectation topk / experts = 0.125.
  const auto [flat_lo, flat_hi] = shares(0.0);
  const auto [skew_lo, skew_hi] = shares(1.2);
  std::printf("share of tokens per expert: s=0 [%.3f, %.3f], s=1.2 [%.3f, %.3f]\n", flat_lo,
              flat_hi, skew_lo, skew_hi);
  EXPECT_GT(flat_lo, 0.10);
  EXPECT_LT(flat_hi, 0.15);
  EXPECT_GT(skew_hi, 4 * flat_hi);
  EXPECT_LT(skew_lo, flat_lo);
}

TEST(skewed_routing, count_by_source_is_round_robin) {
  // top-2, 3 tokens over 2 sources: tokens 0 and 2 are source 0's.
  const std::vector<int32_t> routing = {0, 2, 1, 2, 0, 1};
  EXPECT_EQ(count_by_source(routing, 2, 3, 2), (std::vector<uint64_t>{2, 1, 1, 0, 1, 1}));
  expect_invalid([&] { count_by_source(routing, 4, 3, 2); }, "whole rows");
  expect_invalid([&] { count_by_source(std::vector<int32_t>{0, 3}, 2, 3, 1); }, "expert id 3");
}
