// [ems] replicas over three MP servers hosted in this process: with 2 every block is on two
// servers (the controller's usage counts both copies), so a server killed without a word costs
// no read — the client asks the second owner — and removes go to both; with 1 the killed
// server's blocks are misses. Each run prints the hit rate during the outage (the figure for
// replicas 1 against 2): ./supernode test -R ems_replicas_test -V

#include "../../support/eventually.hpp"
#include "inproc_pool.hpp"

#include <algorithm>
#include <gtest/gtest.h>
#include <iostream>
#include <map>

using namespace supernode;
using namespace std::chrono_literals;
namespace ems = supernode::services::ems;
using supernode::testing::eventually;
using supernode::testing::inproc_pool;
using supernode::testing::value_of;

namespace {

constexpr size_t block_count = 60;
constexpr const char* ns = "ctx";

struct stored_blocks {
  std::vector<std::string> keys;
  std::vector<std::vector<std::byte>> values;
};

stored_blocks put_blocks(ems::ems_client& client) {
  stored_blocks s;
  std::vector<ems::pool_put> items;
  for (size_t i = 0; i < block_count; ++i) {
    s.keys.push_back("block-" + std::to_string(i));
    s.values.push_back(value_of(1024 + i, static_cast<unsigned>(i)));
  }
  for (size_t i = 0; i < block_count; ++i) items.push_back({s.keys[i], s.values[i]});
  for (const auto& o : client.put(ns, items)) EXPECT_TRUE(o.stored) << o.error;
  return s;
}

// The blocks the controller's reports count in `ns`, every copy included.
uint64_t reported_blocks(inproc_pool& pool) {
  return pool.controller().locked([](ems::mp_controller& c) {
    const auto usage = c.namespace_usage();
    const auto it = usage.find(ns);
    return it == usage.end() ? uint64_t{0} : it->second.blocks;
  });
}

class ems_replicas : public ::testing::TestWithParam<int> {};

} // namespace

TEST_P(ems_replicas, a_killed_servers_blocks_are_read_from_the_second_owner_only_with_two) {
  const int replicas = GetParam();
  inproc_pool pool("ems-replicas", 3, "replicas = " + std::to_string(replicas) + "\n");
  auto& client = pool.client();
  ASSERT_TRUE(client.wait_for_ring([&](const auto& s) { return s == pool.server_names(); }, 10s));
  const auto blocks = put_blocks(client);
  // The second copies are asynchronous: the servers' usage reports say when they all landed.
  ASSERT_TRUE(eventually([&] { return reported_blocks(pool) == block_count * replicas; }))
      << reported_blocks(pool) << " blocks reported";

  ems::hash_ring ring(pool.ems().vnodes);
  for (auto& s : pool.server_names()) ring.add_server(s);
  const std::string killed = ring.owner(ns, blocks.keys[0]);
  size_t owned_by_killed = 0;
  for (auto& k : blocks.keys) owned_by_killed += ring.owner(ns, k) == killed;
  pool.kill_server(killed);

  const auto got = client.get(ns, blocks.keys);
  ASSERT_EQ(got.blocks.size(), block_count);
  size_t hits = 0;
  for (size_t i = 0; i < block_count; ++i) {
    if (!got.blocks[i]) continue;
    ++hits;
    EXPECT_EQ(*got.blocks[i], blocks.values[i]) << blocks.keys[i];
  }
  std::cout << "hit rate while " << killed << " is down, replicas = " << replicas << ": " << hits
            << "/" << block_count << " = " << static_cast<double>(hits) / block_count << "\n";
  EXPECT_GT(owned_by_killed, 0u);
  if (replicas == 2) {
    EXPECT_EQ(hits, block_count) << "a block with a live second copy was a miss";
    EXPECT_TRUE(client.get(ns, std::vector<std::string>{blocks.keys[0]}).blocks.at(0));
    EXPECT_EQ(client.exists(ns, blocks.keys), std::vector<bool>(block_count, true));
  } else {
    EXPECT_EQ(hits, block_count - owned_by_killed) << "the killed server's blocks came back";
    EXPECT_FALSE(client.get(ns, std::vector<std::string>{blocks.keys[0]}).blocks.at(0));
  }
  // Removes reach every copy a live server holds: nothing of them is left to read.
  EXPECT_EQ(client.remove(ns, blocks.keys), hits);
  const auto after = client.get(ns, blocks.keys);
  for (size_t i = 0; i < block_count; ++i) EXPECT_FALSE(after.blocks[i]) << blocks.keys[i];
}

INSTANTIATE_TEST_SUITE_P(replicas, ems_replicas, ::testing::Values(1, 2),
                         [](const auto& info) { return "replicas_" + std::to_string(info.param); });

// A hand-over under replicas = 2: a server that joins receives the copies it now owns, first
// or second, so that losing its co-owner afterwards costs no read. A fresh session reads each
// key at the new ring's owners only, so a stale copy on a server that no longer owns the key
// cannot hide a copy the hand-over failed to deliver.
TEST(ems_replicas, with_two_a_joining_server_gets_the_copies_it_owns_before_the_ring_moves) {
  inproc_pool pool("ems-replicas-join", 4, "replicas = 2\n", /*started=*/3);
  auto& client = pool.client();
  const std::vector<std::string> three{"mp_server-0", "mp_server-1", "mp_server-2"};
  ASSERT_TRUE(client.wait_for_ring([&](const auto& s) { return s == three; }, 10s));
  ASSERT_TRUE(eventually(
      [&] { return pool.controller().locked([](ems::mp_controller& c) { return c.settled(); }); },
      10s));
  const auto blocks = put_blocks(client);
  ASSERT_TRUE(eventually([&] { return reported_blocks(pool) == block_count * 2; }))
      << reported_blocks(pool) << " blocks reported";

  pool.start_server(3);
  ASSERT_TRUE(client.wait_for_ring([&](const auto& s) { return s == pool.server_names(); }, 20s));
  // The co-owner that shares the most keys with the newcomer is the one to lose.
  ems::hash_ring ring(pool.ems().vnodes);
  for (auto& s : pool.server_names()) ring.add_server(s);
  std::map<std::string, size_t> shared_with_new;
  for (auto& k : blocks.keys) {
    const auto owners = ring.owners(ns, k, 2);
    if (std::find(owners.begin(), owners.end(), "mp_server-3") == owners.end()) continue;
    for (auto& o : owners)
      if (o != "mp_server-3") ++shared_with_new[o];
  }
  ASSERT_FALSE(shared_with_new.empty()) << "the newcomer owns no key: pick more keys";
  const auto killed =
      std::max_element(shared_with_new.begin(), shared_with_new.end(), [](auto& a, auto& b) {
        return a.second < b.second;
      })->first;
  // The counts are the storage thread's snapshot after the batch of requests it is on, which
  // may end after its answers let the ring publish.
  EXPECT_TRUE(
      eventually([&] { return pool.server(3).service().handover_counts().blocks_in > 0; }, 5s));
  pool.kill_server(killed);

  auto session = pool.new_session();
  ASSERT_TRUE(session->client().wait_for_servers(10s));
  const auto got = session->client().get(ns, blocks.keys);
  ASSERT_EQ(got.blocks.size(), block_count);
  for (size_t i = 0; i < block_count; ++i) {
    ASSERT_TRUE(got.blocks[i]) << blocks.keys[i] << " lost with " << killed << " down ("
                               << shared_with_new[killed] << " keys shared with mp_server-3)";
    EXPECT_EQ(*got.blocks[i], blocks.values[i]) << blocks.keys[i];
  }
}

TEST(ems_replicas_config, replicas_outside_one_and_two_is_refused) {
  EXPECT_THROW(inproc_pool("ems-replicas-bad", 1, "replicas = 3\n"), std::exception);
  EXPECT_THROW(inproc_pool("ems-replicas-bad", 1, "replicas = 0\n"), std::exception);
}
