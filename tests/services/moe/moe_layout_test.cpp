// Expert placement and the static dispatch/combine buffer sizes: the paper's own numbers, and
// no routing — however adversarial — sends one rank more messages than its buffer holds.

#include "services/moe/dispatch_buffers.hpp"
#include "services/moe/expert_placement.hpp"

#include <gtest/gtest.h>
#include <map>
#include <numeric>
#include <random>

using namespace supernode::services;

TEST(dispatch_buffers, reproduce_the_papers_645_mib_per_die) {
  dispatch_sizes s;
  s.ranks = 320;
  s.local_batch = 96;
  s.topk = 8;
  s.experts_per_rank = 1;
  s.hidden = 7168;
  s.alignment = 512;           // the scale padded to 512 bytes
  s.combine_element_bytes = 2; // BF16 on the NPU
  EXPECT_EQ(s.max_tokens(), 96);
  EXPECT_EQ(s.dispatch_message_bytes(), 7680u); // 7.5 KiB
  EXPECT_EQ(s.combine_message_bytes(), 14336u); // 14 KiB
  EXPECT_EQ(s.dispatch_buffer_bytes(), 225u << 20);
  EXPECT_EQ(s.combine_buffer_bytes(), 420u << 20);
  EXPECT_NE(s.describe().find("225.0 MiB"), std::string::npos) << s.describe();
  s.hidden = 0;
  EXPECT_THROW(s.validate(), std::invalid_argument);
}

TEST(expert_placement, uniform_runs_replicas_and_routes) {
  auto p = expert_placement::uniform(10, 4);
  EXPECT_EQ(p.experts_on(0), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.experts_on(3), (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(p.max_experts_per_rank(), 3);
  EXPECT_THROW(expert_placement::uniform(2, 4), std::invalid_argument);

  p.add_replica(9, 0); // a hot expert copied to rank 0
  EXPECT_THROW(p.add_replica(9, 0), std::invalid_argument);
  EXPECT_EQ(p.max_experts_per_rank(), 4);
  EXPECT_EQ(p.route(9, 0), (expert_slot{0, 3})); // local copy: no traffic
  EXPECT_EQ(p.route(9, 3), (expert_slot{3, 1}));
  // Other sources spread over the copies, the same way on every rank.
  EXPECT_NE(p.route(9, 1).rank, p.route(9, 2).rank);
}

namespace {

// Messages each (source, destination) pair sends for `routes[source][token]` = top-k experts.
std::map<std::pair<int32_t, int32_t>, int64_t>
messages(const expert_placement& p, const std::vector<std::vector<std::vector<int32_t>>>& routes) {
  std::map<std::pair<int32_t, int32_t>, int64_t> n;
  for (int32_t src = 0; src < static_cast<int32_t>(routes.size()); ++src)
    for (auto& token : routes[src])
      for (int32_t e : token) ++n[{src, p.route(e, src).rank}];
  return n;
}

} // namespace

TEST(dispatch_buffers, no_routing_overflows_a_rank) {
  for (int32_t ranks : {1, 2, 4, 8}) {
    for (int32_t experts : {8, 64}) {
      if (ranks > experts) continue;
      auto p = expert_placement::uniform(experts, ranks);
      if (ranks > 1) p.add_replica(experts - 1, 0);
      dispatch_sizes s;
      s.ranks = ranks;
      s.local_batch = 16;
      s.topk = 8;
      s.experts_per_rank = p.max_experts_per_rank();
      s.hidden = 64;
      // Adversarial: every token of every rank picks the experts of rank 0 first.
      std::vector<int32_t> order(experts);
      std::iota(order.begin(), order.end(), 0);
      std::stable_partition(order.begin(), order.end(),
                            [&](int32_t e) { return p.route(e, 1 % ranks).rank == 0; });
      std::vector<int32_t> top(order.begin(), order.begin() + std::min<int32_t>(8, experts));
      std::vector<std::vector<std::vector<int32_t>>> all_to_one(
          ranks, std::vector<std::vector<int32_t>>(s.local_batch, top));
      // Random: distinct experts per token.
      std::mt19937 rng(ranks * 100 + experts);
      std::vector<std::vector<std::vector<int32_t>>> random(ranks);
      for (auto& tokens : random)
        for (int64_t t = 0; t < s.local_batch; ++t) {
          std::shuffle(order.begin(), order.end(), rng);
          tokens.emplace_back(order.begin(), order.begin() + std::min<int32_t>(8, experts));
        }
      for (auto* routes : {&all_to_one, &random})
        for (auto& [pair, count] : messages(p, *routes))
          EXPECT_LE(count, s.max_tokens()) << ranks << " ranks, " << experts << " experts, "
                                           << pair.first << " -> " << pair.second;
    }
  }
}
