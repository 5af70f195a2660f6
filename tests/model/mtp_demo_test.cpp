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

// Drafting through a head of the 4,096 lowest ids (model/draft_vocab.hpp) gives the same
// tokens, and the trained module still drafts tokens that are accepted.
TEST(mtp, a_reduced_draft_vocabulary_keeps_the_tokens_and_still_drafts_accepted_ones) {
  int64_t accepted = 0;
  expect_same_tokens_at_every_depth(demo_weights(model::precision::int8), &accepted, 4096);
  EXPECT_GT(accepted, 0) << "no draft from the reduced vocabulary was accepted";
}
