// Context-cache keys: a block's key names its whole prefix under one model version, so prompts
// share exactly the blocks of their common full-block prefix, and the longest cached prefix
// stops at the first block that is missing.

#include "services/ems/prefix_keys.hpp"

#include <gtest/gtest.h>
#include <set>

using namespace supernode::services::ems;

namespace {
std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (i * 7919 + salt * 104729) % 129000;
  return t;
}
} // namespace

TEST(prefix_keys, only_full_blocks_get_keys_and_keys_are_deterministic) {
  const auto t = tokens(37, 1);
  const auto keys = prefix_block_keys("tiny@1", t, 8);
  EXPECT_EQ(keys.size(), 4u); // 37 tokens: 4 full blocks of 8, 5 left over
  EXPECT_EQ(keys, prefix_block_keys("tiny@1", t, 8));
  EXPECT_EQ(std::set<uint64_t>(keys.begin(), keys.end()).size(), keys.size());
  EXPECT_TRUE(prefix_block_keys("tiny@1", tokens(7, 1), 8).empty());
  EXPECT_THROW(prefix_block_keys("tiny@1", t, 0), std::invalid_argument);
  EXPECT_THROW(prefix_block_keys("", t, 8), std::invalid_argument);
}

TEST(prefix_keys, prompts_share_exactly_the_blocks_of_their_common_prefix) {
  auto a = tokens(64, 2), b = a;
  b[35] += 1; // differs inside block 4 (tokens 32..39)
  const auto ka = prefix_block_keys("m@1", a, 8), kb = prefix_block_keys("m@1", b, 8);
  ASSERT_EQ(ka.size(), 8u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(ka[i], kb[i]) << "block " << i;
  for (size_t i = 4; i < 8; ++i) EXPECT_NE(ka[i], kb[i]) << "block " << i;
  // The same tokens in a later position are a different prefix.
  std::vector<int32_t> shifted(a.begin() + 8, a.end());
  EXPECT_NE(prefix_block_keys("m@1", shifted, 8)[0], ka[1]);
}

TEST(prefix_keys, another_model_or_version_shares_nothing) {
  const auto t = tokens(32, 3);
  const auto v1 = prefix_block_keys("m@1", t, 8), v2 = prefix_block_keys("m@2", t, 8),
             other = prefix_block_keys("n@1", t, 8);
  for (size_t i = 0; i < v1.size(); ++i) {
    EXPECT_NE(v1[i], v2[i]);
    EXPECT_NE(v1[i], other[i]);
  }
}

TEST(prefix_keys, the_longest_cached_prefix_stops_at_the_first_miss) {
  const auto keys = prefix_block_keys("m@1", tokens(40, 4), 8);
  std::set<uint64_t> cache = {keys[0], keys[1], keys[3]}; // block 2 was evicted
  EXPECT_EQ(longest_cached_prefix(keys, [&](uint64_t k) { return cache.count(k) > 0; }), 2u);
  EXPECT_EQ(longest_cached_prefix(keys, [](uint64_t) { return false; }), 0u);
  EXPECT_EQ(longest_cached_prefix(keys, [](uint64_t) { return true; }), keys.size());
  EXPECT_EQ(context_block_name(0x1234), "ctx/0000000000001234");
}
