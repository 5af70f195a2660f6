// formed_over: a group's formation over the members alive now. Expert shards that joined beyond
// the config are taken in as expert hosts by a group that takes them, numbered by their names,
// so a configured shard and a joined one (whose configs list different shards) form the same
// group; a group that does not take them ignores them.

#include "../../model/tiny_model.hpp"
#include "services/moe/ep_membership.hpp"

#include <gtest/gtest.h>

using namespace supernode::services;
namespace model = supernode::model;

namespace {

// The split's group as instance `self` sees it: attention ranks decode-0/1, then `shards`.
ep_membership split_group(const std::vector<std::string>& shards, const std::string& self) {
  ep_membership m;
  m.members = {"decode-0", "decode-1"};
  for (auto& s : shards) {
    m.options.expert_hosts.push_back(static_cast<int32_t>(m.members.size()));
    m.members.push_back(s);
  }
  m.options.ranks = static_cast<int32_t>(m.members.size());
  for (size_t r = 0; r < m.members.size(); ++r)
    if (m.members[r] == self) m.options.rank = static_cast<int32_t>(r);
  m.options.local_batch = 8;
  m.fabric_kind = "shm";
  m.fabric.group = "decode-ep0";
  m.takes_joined_shards = true;
  return m;
}

using view = std::vector<std::pair<std::string, uint64_t>>;

} // namespace

TEST(ep_formation, joined_shards_are_expert_hosts_numbered_alike_on_every_rank) {
  const auto weights = supernode::testing::tiny_weights(model::precision::int8);
  const view alive{{"decode-0", 1},       {"decode-1", 2},       {"expert_shard-0", 3},
                   {"expert_shard-1", 4}, {"expert_shard-5", 7}, {"expert_shard-4", 6}};
  // decode-0 lists shards 0..1 (the config); expert_shard-5 lists them and itself.
  const auto from_config =
      formed_over(split_group({"expert_shard-0", "expert_shard-1"}, "decode-0"), alive,
                  weights->config, weights->prec);
  const auto from_joiner = formed_over(
      split_group({"expert_shard-0", "expert_shard-1", "expert_shard-5"}, "expert_shard-5"), alive,
      weights->config, weights->prec);
  const std::vector<std::string> members{"decode-0",       "decode-1",       "expert_shard-0",
                                         "expert_shard-1", "expert_shard-4", "expert_shard-5"};
  EXPECT_EQ(from_config.membership.members, members);
  EXPECT_EQ(from_joiner.membership.members, members);
  EXPECT_EQ(from_config.epoch, from_joiner.epoch) << "the same members make the same formation";
  EXPECT_EQ(from_config.membership.fabric.group, from_joiner.membership.fabric.group);
  EXPECT_EQ(from_config.membership.options.expert_hosts, (std::vector<int32_t>{2, 3, 4, 5}));
  EXPECT_EQ(from_config.membership.options.rank, 0);
  EXPECT_EQ(from_joiner.membership.options.rank, 5);
  EXPECT_EQ(from_joiner.membership.options.ranks, 6);
  EXPECT_EQ(from_config.membership.fabric.bytes, from_joiner.membership.fabric.bytes);
}

TEST(ep_formation, a_group_that_takes_no_joined_shards_ignores_them) {
  const auto weights = supernode::testing::tiny_weights(model::precision::int8);
  auto group = split_group({"expert_shard-0", "expert_shard-1"}, "decode-1");
  group.takes_joined_shards = false;
  const auto f = formed_over(
      group, {{"decode-0", 1}, {"decode-1", 2}, {"expert_shard-1", 4}, {"expert_shard-4", 6}},
      weights->config, weights->prec);
  EXPECT_EQ(f.membership.members,
            (std::vector<std::string>{"decode-0", "decode-1", "expert_shard-1"}));
  EXPECT_EQ(f.membership.options.rank, 1);
  EXPECT_EQ(f.membership.options.expert_hosts, (std::vector<int32_t>{2}));
}
