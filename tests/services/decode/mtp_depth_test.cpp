// The adaptive MTP depth (services/decode/mtp_depth.hpp): from step times it measured and the
// acceptance it saw, it drafts where drafting yields more tokens per second, stops drafting at
// batches where verification costs more than it yields, and keeps trying the other depths.

#include "services/decode/mtp_depth.hpp"

#include <functional>
#include <gtest/gtest.h>
#include <map>

using supernode::services::mtp_depth_policy;

namespace {

// Runs `steps` steps at `batch`, each taking seconds_at(depth) and each sequence accepting
// its drafts at `acceptance` (every draft before the first rejected one); the depths chosen.
std::map<int64_t, int> drive(mtp_depth_policy& p, int64_t batch, int steps,
                             const std::function<double(int64_t)>& seconds_at, double acceptance) {
  std::map<int64_t, int> chosen;
  double carry = 0.0;
  for (int i = 0; i < steps; ++i) {
    const int64_t k = p.depth(batch);
    ++chosen[k];
    p.record_step(batch, k, seconds_at(k));
    for (int64_t s = 0; s < batch; ++s) {
      int64_t accepted = 0;
      while (accepted < k) { // deterministic: a fraction `acceptance` of reached drafts pass
        carry += acceptance;
        if (carry < 1.0) break;
        carry -= 1.0;
        ++accepted;
      }
      if (k > 0) p.record_sequence(k, accepted);
    }
  }
  return chosen;
}

} // namespace

TEST(mtp_depth, without_adaptation_every_step_drafts_the_configured_depth) {
  mtp_depth_policy p(3, false);
  for (int64_t batch : {1, 8, 64}) EXPECT_EQ(p.depth(batch), 3);
  mtp_depth_policy off(0, true);
  EXPECT_EQ(off.depth(4), 0);
}

TEST(mtp_depth, drafts_where_it_pays_and_stops_where_verification_costs_more) {
  mtp_depth_policy p(2, true);
  // Batch 1: a step is bandwidth-bound, a draft adds 10 % per depth; 90 % accepted.
  const auto small = drive(
      p, 1, 200, [](int64_t k) { return 1e-3 * (1.0 + 0.1 * static_cast<double>(k)); }, 0.9);
  // Batch 64: compute-bound, each verified row costs as much as a sequence's token.
  const auto large = drive(
      p, 64, 200, [](int64_t k) { return 64e-3 * (1.0 + static_cast<double>(k)); }, 0.9);
  EXPECT_GT(small.at(2), 150) << "batch 1 should draft two";
  EXPECT_GT(large.at(0), 150) << "batch 64 should not draft";
  EXPECT_EQ(p.depth(1), 2);
  EXPECT_GT(p.acceptance(0), 0.8); // the first drafts, as the drive above accepted them
  EXPECT_GT(p.expected_tokens(2), p.expected_tokens(1));
  // Both learned, and the other depths are still tried now and then.
  EXPECT_GT(small.size(), 1u);
  EXPECT_GT(large.size(), 1u);
}

TEST(mtp_depth, follows_acceptance_when_drafts_stop_being_accepted) {
  mtp_depth_policy p(1, true);
  auto cost = [](int64_t k) { return 1e-3 * (1.0 + 0.3 * static_cast<double>(k)); };
  EXPECT_GT(drive(p, 4, 100, cost, 0.9).at(1), 80);
  // The text turned unpredictable: 1.1 tokens per 1.3 times the time no longer pays.
  const auto later = drive(p, 4, 300, cost, 0.1);
  EXPECT_GT(later.at(0), 200);
}
