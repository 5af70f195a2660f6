// The MTP module of the trained demo model drafts tokens the main model accepts, and greedy
// tokens stay those of decoding without drafts (mtp_test.cpp runs the rest).

#include "mtp_tokens.hpp"

using namespace supernode;
using namespace supernode::testing;

TEST(mtp, greedy_tokens_equal_decoding_without_drafts_on_the_trained_demo_model) {
  int64_t accepted = 0;
  expect_same_tokens_at_every_depth(demo_weights(model::precision::int8), &accepted);
  EXPECT_GT(accepted, 0) << "the trained MTP module's drafts are never accepted";
}
