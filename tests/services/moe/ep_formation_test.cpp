// formed_over: a group's formation over the members alive now. Expert shards that joined beyond
// the config are taken in as expert hosts by a group that takes them, numbered by their names,
// so a configured shard and a joined one (whose configs list different shards) form the same
// group; a group that does not take them ignores them. Attention ranks that join past the config
// form groups of their own, by the numbers in their names.

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

namespace {

// decode-0..1 are the config's one decode group of 2 ranks; `dispatch` is the dispatch plane's
// kind.
supernode::transport::cluster_config two_rank_decode(const std::string& dispatch) {
  return supernode::transport::cluster_config::parse(
      "[cluster]\nname = \"joined-groups\"\n"
      "[planes.vpc]\nkind = \"zmq\"\n[planes.ub]\nkind = \"" +
          dispatch +
          "\"\n[flows]\ndefault = \"vpc\"\ndispatch = \"ub\"\n"
          "[process.gateway]\nroles = [\"gateway\", \"scheduler\"]\n"
          "[process.prefill]\nroles = [\"prefill\"]\n"
          "[process.decode]\nroles = [\"decode\"]\ncount = 2\n",
      "joined-groups.toml");
}

// The group `name` belongs to, as its own process sees it (joined when past the config).
ep_membership membership_of(supernode::transport::cluster_config cluster, const std::string& name,
                            int32_t ranks) {
  const auto weights = supernode::testing::tiny_weights(model::precision::int8);
  serving_config serving;
  serving.decode_ranks = ranks;
  const int index = std::stoi(name.substr(name.rfind('-') + 1));
  const auto& self =
      index < 2 ? cluster.instance(name) : cluster.add_joined_instance("decode", "decode", index);
  auto m = ep_membership_of(cluster, serving, self, weights->config, weights->prec,
                            supernode::log::logger{name});
  if (!m) throw std::runtime_error(name + " is in no group");
  return *m;
}

} // namespace

TEST(ep_formation, ranks_joined_past_the_config_form_groups_of_their_own_by_their_names) {
  const auto cluster = two_rank_decode("shm");
  const std::vector<std::string> second{"decode-2", "decode-3"};
  const auto two = membership_of(cluster, "decode-2", 2);
  const auto three = membership_of(cluster, "decode-3", 2);
  EXPECT_EQ(two.members, second);
  EXPECT_EQ(three.members, second);
  EXPECT_EQ(two.options.rank, 0);
  EXPECT_EQ(three.options.rank, 1);
  EXPECT_EQ(two.fabric.group, "decode-ep1");
  EXPECT_EQ(two.fabric.group, three.fabric.group);
  EXPECT_TRUE(two.options.expert_hosts.empty()) << "the group's ranks host its experts";
  EXPECT_FALSE(two.takes_joined_shards);
  EXPECT_EQ(membership_of(cluster, "decode-5", 2).members,
            (std::vector<std::string>{"decode-4", "decode-5"}));
  EXPECT_EQ(membership_of(cluster, "decode-1", 2).members,
            (std::vector<std::string>{"decode-0", "decode-1"}))
      << "the configured group stays as the config lists it";
  // A joined group forms over its ranks alive, as a configured one does: decode-2 alone first.
  const auto weights = supernode::testing::tiny_weights(model::precision::int8);
  const auto alone = formed_over(two, {{"decode-2", 1}}, weights->config, weights->prec);
  EXPECT_EQ(alone.membership.options.ranks, 1);
  const auto both =
      formed_over(three, {{"decode-2", 1}, {"decode-3", 1}}, weights->config, weights->prec);
  EXPECT_EQ(both.membership.members, second);
  EXPECT_NE(alone.epoch, both.epoch);
}

TEST(ep_formation, a_rank_cannot_join_a_group_whose_ranks_meet_at_configured_addresses) {
  try {
    membership_of(two_rank_decode("zmq"), "decode-2", 2);
    FAIL() << "a joined rank of a ZeroMQ group was given a membership";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ZeroMQ"), std::string::npos) << e.what();
  }
}
