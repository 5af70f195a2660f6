#include "services/scheduler/pd_mapping.hpp"
#include "services/scheduler/placement.hpp"

#include <gtest/gtest.h>
#include <map>
#include <vector>

using namespace supernode::services;

TEST(pd_mapping, the_papers_worked_example) {
  // Prefill TP 32, decode TP 1 / DP 320: ratio 32, groups of 10; DP ranks 10g..10g+9 pull from
  // prefill TP rank g.
  pd_shape s{32, 1, 320};
  for (int64_t dp = 0; dp < 320; ++dp) EXPECT_EQ(prefill_tp_rank_for(s, dp, 0), dp / 10) << dp;
}

TEST(pd_mapping, spreads_decode_ranks_evenly_over_prefill_ranks) {
  pd_shape s{8, 2, 16}; // ratio 4, groups of 4 DP ranks
  std::map<int64_t, int> uses;
  for (int64_t dp = 0; dp < 16; ++dp)
    for (int64_t tp = 0; tp < 2; ++tp) {
      const auto r = prefill_tp_rank_for(s, dp, tp);
      ASSERT_GE(r, 0);
      ASSERT_LT(r, 8);
      ++uses[r];
    }
  ASSERT_EQ(uses.size(), 8u);
  for (auto& [rank, n] : uses) EXPECT_EQ(n, 4) << rank;
  // Fewer DP ranks than groups still stays inside the prefill group.
  EXPECT_EQ(prefill_tp_rank_for({8, 1, 3}, 2, 0), 2);
}

TEST(pd_mapping, bad_shapes_are_named) {
  EXPECT_THROW(prefill_tp_rank_for({6, 4, 8}, 0, 0), std::invalid_argument);
  EXPECT_THROW(prefill_tp_rank_for({8, 1, 4}, 4, 0), std::invalid_argument);
  EXPECT_THROW(prefill_tp_rank_for({8, 2, 4}, 0, 2), std::invalid_argument);
  EXPECT_THROW(prefill_tp_rank_for({0, 1, 1}, 0, 0), std::invalid_argument);
}

TEST(placement, prefill_goes_to_the_least_loaded_live_instance) {
  std::vector<prefill_load> p{{"prefill-0", 900},
                              {"prefill-1", 100},
                              {"prefill-2", 100},
                              {"prefill-3", 0, false},
                              {"prefill-4", 0, true, true}};
  EXPECT_EQ(pick_prefill(p), "prefill-1"); // ties by name; dead and draining skipped
  p[1].alive = p[2].alive = p[0].alive = false;
  EXPECT_EQ(pick_prefill(p), std::nullopt);
}

TEST(placement, decode_needs_kv_room_and_prefers_the_emptiest) {
  std::vector<decode_load> d{
      {"decode-0", 10, 3}, {"decode-1", 50, 9}, {"decode-2", 50, 2}, {"decode-3", 500, 0, false}};
  EXPECT_EQ(pick_decode(d, 8), "decode-2"); // most free blocks, then smaller batch
  EXPECT_EQ(pick_decode(d, 51), std::nullopt);
  d[2].draining = true;
  EXPECT_EQ(pick_decode(d, 8), "decode-1");
}
