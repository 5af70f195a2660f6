// MP servers joining and leaving a live pool (issue 15): which blocks a ring change moves and
// to whom; one server's hand-over between two block stores; the controller's two phases
// against servers played by the test (the target goes to the servers only, the clients get the
// ring once every server handed its blocks over, or at the hand-over timeout); and a pool in
// this process going 2 -> 3 -> 1 servers with every block still at its owner afterwards.

#include "../../support/ask.hpp"
#include "../../support/eventually.hpp"
#include "../../support/probe_endpoint.hpp"
#include "../../support/role_host.hpp"
#include "inproc_pool.hpp"
#include "services/ems/block_handover.hpp"

#include <gtest/gtest.h>
#include <mutex>

using namespace supernode;
using namespace supernode::testing;
using namespace std::chrono_literals;
namespace ems = supernode::services::ems;
namespace pr = supernode::services::protocol;

namespace {

using names = std::vector<std::string>;

std::vector<std::string> numbered_keys(size_t n) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back("block-" + std::to_string(i));
  return keys;
}

ems::block_store_options store_in(const std::filesystem::path& dir) {
  ems::block_store_options o;
  o.dram_bytes = 4 << 20;
  o.ssd_dir = dir;
  o.ssd_bytes = 64 << 20;
  o.huge_pages = false;
  return o;
}

pr::ems_ring_target target_of(uint64_t version, const names& current, const names& next) {
  pr::ems_ring_target t;
  t.version = version;
  t.vnodes = 64;
  t.copies = 1;
  t.current_servers = current;
  t.servers = next;
  return t;
}

} // namespace

TEST(block_handover, a_join_moves_only_the_keys_the_new_server_owns_and_a_leave_moves_all) {
  const auto before = ems::ring_of(64, {"a", "b"});
  const auto joined = ems::ring_of(64, {"a", "b", "c"});
  const auto left = ems::ring_of(64, {"a"});
  size_t moved = 0;
  for (auto& key : numbered_keys(1000)) {
    const auto owner = before.owner("ns", key);
    const auto to = ems::handover_destinations(before, joined, 1, owner, "ns", key);
    if (joined.owner("ns", key) == "c") {
      EXPECT_EQ(to, names{"c"}) << key;
      ++moved;
    } else {
      EXPECT_TRUE(to.empty()) << key;
    }
    // Only an owner hands a key over (a stale copy elsewhere stays put).
    const std::string other = owner == "a" ? "b" : "a";
    EXPECT_TRUE(ems::handover_destinations(before, joined, 1, other, "ns", key).empty());
    // b leaves: everything b owns goes to a, nothing of a's moves.
    EXPECT_EQ(ems::handover_destinations(before, left, 1, owner, "ns", key),
              owner == "b" ? names{"a"} : names{});
  }
  // About a third of the keys move to the third server (consistent hashing).
  EXPECT_GT(moved, 200u);
  EXPECT_LT(moved, 470u);
}

TEST(block_handover, one_server_hands_its_moved_blocks_to_the_new_owners_store_in_batches) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("supernode-handover-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ems::block_store from(store_in(dir / "a")), to(store_in(dir / "c"));
  const auto current = ems::ring_of(64, {"a", "b"});
  const auto target = ems::ring_of(64, {"a", "b", "c"});
  const auto keys = numbered_keys(600);
  std::vector<std::string> owned; // what "a" holds: the keys it owns now
  for (auto& k : keys)
    if (current.owner("ctx", k) == "a") {
      ASSERT_TRUE(from.put("ctx", k, value_of(8 << 10, static_cast<unsigned>(owned.size()))));
      owned.push_back(k);
    }

  ems::block_handover handover("a", /*batch_bytes=*/64 << 10);
  handover.begin(target_of(7, {"a", "b"}, {"a", "b", "c"}), from);
  size_t expected = 0;
  for (auto& k : owned) expected += target.owner("ctx", k) == "c";
  EXPECT_EQ(handover.planned(), expected);
  ASSERT_GT(expected, 0u);
  // A block stored while the change runs goes too (its owner under the target is "c").
  std::string late;
  for (int i = 0; late.empty(); ++i)
    if (auto k = "late-" + std::to_string(i);
        current.owner("ctx", k) == "a" && target.owner("ctx", k) == "c")
      late = k;
  ASSERT_TRUE(from.put("ctx", late, value_of(100, 9)));
  handover.note_put("ctx", late);

  // Batches as the server sends them: at most max_batches_in_flight unanswered at a time.
  size_t batches = 0;
  for (;;) {
    std::vector<ems::handover_batch> sent;
    while (auto b = handover.next_batch(from)) sent.push_back(std::move(*b));
    if (sent.empty()) break;
    EXPECT_LE(sent.size(), static_cast<size_t>(ems::block_handover::max_batches_in_flight));
    for (auto& b : sent) {
      ++batches;
      EXPECT_EQ(b.to, "c");
      EXPECT_LE(b.put.keys.size(), ems::block_handover::max_batch_blocks);
      uint64_t at = 0;
      const auto data = b.put.data.bytes();
      for (size_t i = 0; i < b.put.keys.size(); ++i) {
        ASSERT_TRUE(to.put(b.put.ns, b.put.keys[i], data.subspan(at, b.put.sizes[i])));
        at += b.put.sizes[i];
      }
      // Done once the blocks planned at the start are answered, whatever was put since.
      if (b.planned > 0) {
        EXPECT_FALSE(handover.take_finished()) << "answers are outstanding";
      }
      handover.answered(7, b.planned, b.put.keys.size(), 0);
    }
  }
  EXPECT_GT(batches, 2u) << "8 KiB blocks over 64 KiB batches come in several batches";
  EXPECT_TRUE(handover.take_finished());
  EXPECT_FALSE(handover.take_finished()) << "a change is reported finished once";
  EXPECT_EQ(handover.change_sent(), expected + 1);
  EXPECT_EQ(handover.totals().blocks_out, expected + 1);
  for (auto& k : owned) {
    const bool moves = target.owner("ctx", k) == "c";
    EXPECT_EQ(to.exists("ctx", k), moves) << k;
    if (moves) {
      EXPECT_EQ(to.get("ctx", k), from.get("ctx", k)) << k;
    }
  }
  EXPECT_EQ(to.get("ctx", late), value_of(100, 9));
  EXPECT_EQ(handover.end(7), 0u);
  EXPECT_FALSE(handover.active());

  // A change published before its blocks left (the controller's timeout): this server still
  // lives, so what it had not handed over goes on to the owners, and the change then closes.
  handover.begin(target_of(9, {"a", "b", "c"}, {"b", "c"}), from);
  const auto planned = handover.planned();
  EXPECT_EQ(planned, owned.size() - expected) << "a leaves: all it owns under {a, b, c}";
  EXPECT_EQ(handover.end(8), 0u) << "an older ring does not end the change";
  EXPECT_EQ(handover.end(9), planned);
  EXPECT_TRUE(handover.active()) << "blocks are still queued";
  EXPECT_FALSE(handover.take_finished()) << "the controller is past this change";
  uint64_t forwarded = 0;
  while (auto b = handover.next_batch(from)) {
    forwarded += b->put.keys.size();
    handover.answered(9, b->planned, b->put.keys.size(), 0);
  }
  EXPECT_EQ(forwarded, planned);
  EXPECT_EQ(handover.totals().blocks_failed, 0u);
  EXPECT_FALSE(handover.active()) << "a published change closes once idle";
  std::filesystem::remove_all(dir);
}

TEST(block_handover, a_put_during_a_change_still_reaches_its_owner_when_the_next_change_begins) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("supernode-handover-carry-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ems::block_store from(store_in(dir / "a"));
  const auto before = ems::ring_of(64, {"a", "b"});
  const auto joined = ems::ring_of(64, {"a", "b", "c"});
  // A key "a" owns under {a, b} and "c" owns under {a, b, c}: put at "a" during the join by a
  // client with the older ring.
  std::string key;
  for (int i = 0; key.empty(); ++i)
    if (auto k = "k-" + std::to_string(i);
        before.owner("ctx", k) == "a" && joined.owner("ctx", k) == "c")
      key = k;
  ems::block_handover handover("a");
  handover.begin(target_of(3, {"a", "b"}, {"a", "b", "c"}), from);
  EXPECT_TRUE(handover.take_finished()) << "nothing was planned at the start";
  ASSERT_TRUE(from.put("ctx", key, value_of(64, 1)));
  handover.note_put("ctx", key);
  // The next change begins before that block left: under {a, b, c} "a" does not own it, but
  // it is still the only holder, so it goes to its owner under the new target.
  handover.begin(target_of(4, {"a", "b", "c"}, {"b", "c"}), from);
  std::vector<std::string> sent;
  while (auto b = handover.next_batch(from)) {
    for (auto& k : b->put.keys)
      if (k == key) sent.push_back(b->to);
    handover.answered(4, b->planned, b->put.keys.size(), 0);
  }
  const auto after = ems::ring_of(64, {"b", "c"});
  EXPECT_EQ(sent, std::vector<std::string>{after.owner("ctx", key)});
  std::filesystem::remove_all(dir);
}

TEST(block_handover, a_put_that_crossed_the_publish_goes_to_its_owner_on_the_new_ring) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("supernode-handover-stray-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ems::block_store at_b(store_in(dir / "b"));
  const auto before = ems::ring_of(64, {"a", "b"});
  const auto joined = ems::ring_of(64, {"a", "b", "c"});
  std::string moved, kept; // "b" owns both under {a, b}; "c" takes `moved` under {a, b, c}
  for (int i = 0; moved.empty() || kept.empty(); ++i) {
    auto k = "k-" + std::to_string(i);
    if (before.owner("ctx", k) != "b") continue;
    (joined.owner("ctx", k) == "c" ? moved : kept) = k;
  }
  // "b" took part in the join (nothing of its own moved) and has seen the ring published.
  ems::block_handover handover("b");
  handover.begin(target_of(3, {"a", "b"}, {"a", "b", "c"}), at_b);
  handover.learn_ring(3, 64, 1, {"a", "b", "c"});
  EXPECT_EQ(handover.end(3), 0u);
  EXPECT_FALSE(handover.active());
  // A client still on {a, b} puts both: the block "b" owns stays, the other goes to "c".
  for (auto& k : {kept, moved}) ASSERT_TRUE(at_b.put("ctx", k, value_of(64, 1)));
  EXPECT_FALSE(handover.note_client_put("ctx", kept));
  EXPECT_FALSE(handover.active()) << "nothing to forward";
  EXPECT_TRUE(handover.note_client_put("ctx", moved)) << "its acknowledgement must wait";
  EXPECT_TRUE(handover.active());
  auto batch = handover.next_batch(at_b);
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->to, "c");
  EXPECT_EQ(batch->put.keys, std::vector<std::string>{moved});
  EXPECT_FALSE(handover.next_batch(at_b));
  EXPECT_FALSE(handover.idle()) << "the batch is unanswered";
  handover.answered(3, batch->planned, 1, 0);
  EXPECT_TRUE(handover.idle());
  EXPECT_FALSE(handover.next_batch(at_b));
  EXPECT_FALSE(handover.active()) << "the forward closes once answered";
  EXPECT_EQ(handover.totals().blocks_out, 1u);

  // A block another server handed over is never sent on for a ring this server has not seen
  // yet: its sender's ring is the newer one.
  handover.note_put("ctx", moved);
  EXPECT_FALSE(handover.active());
  // An older ring learnt late does not replace the newest.
  handover.learn_ring(2, 64, 1, {"a", "b"});
  EXPECT_TRUE(handover.note_client_put("ctx", moved));
  std::filesystem::remove_all(dir);
}

namespace {

// The controller alone, with the servers and a client played by probe endpoints that record the
// ring views and targets they receive.
class scripted_pool {
public:
  scripted_pool()
      : config_("ems-two-phase", "[process.ems_controller]\nroles = [\"mp_controller\"]\n"
                                 "[process.ems]\nroles = [\"mp_server\"]\ncount = 3\n"
                                 "[process.probe]\nroles = [\"probe\"]\n"
                                 "[ems]\nhandover_timeout_ms = 3000\n"),
        controller_(cluster(), "mp_controller-0",
                    std::make_shared<ems::mp_controller>(cluster(), config_.file.serving.ems)) {
    for (auto* name : {"mp_server-0", "mp_server-1", "probe-0"}) start(name);
  }
  // A peer that starts now, recording what it receives.
  void start(const std::string& name) {
    peers_[name] = std::make_unique<probe_endpoint>(cluster(), name, [this, name](auto& ep) {
      ep.set_message_handler([this, name](const transport::peer_id&, transport::envelope m) {
        std::lock_guard lock(mutex_);
        if (auto* v = m.template get<pr::ems_ring_view>()) views_[name] = *v;
        if (auto* t = m.template get<pr::ems_ring_target>()) targets_[name] = *t;
      });
    });
  }
  const transport::cluster_config& cluster() const { return config_.file.cluster; }
  role_host<ems::mp_controller>& controller() { return controller_; }

  template<class Message>
  void send(const std::string& peer, Message m) {
    peers_.at(peer)->ep.send("ems", "mp_controller-0", transport::make_envelope(std::move(m)));
  }
  // The servers of the last ring view / target `name` received.
  names view_of(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto it = views_.find(name);
    return it == views_.end() ? names{"(none)"} : it->second.servers;
  }
  std::optional<pr::ems_ring_view> last_view_of(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto it = views_.find(name);
    if (it == views_.end()) return std::nullopt;
    return it->second;
  }
  void forget_view(const std::string& name) {
    std::lock_guard lock(mutex_);
    views_.erase(name);
  }
  std::optional<pr::ems_ring_target> target_of(const std::string& name) {
    std::lock_guard lock(mutex_);
    auto it = targets_.find(name);
    if (it == targets_.end()) return std::nullopt;
    return it->second;
  }
  names ring() {
    return controller_.locked([](ems::mp_controller& c) { return c.ring().servers(); });
  }
  void forget_target(const std::string& name) {
    std::lock_guard lock(mutex_);
    targets_.erase(name);
  }

private:
  inproc_cluster_file config_;
  // Declared before the controller and the peers, so that they outlive every handler that
  // records into them: the controller keeps pushing views and targets until it stops.
  std::mutex mutex_;
  std::map<std::string, pr::ems_ring_view> views_;
  std::map<std::string, pr::ems_ring_target> targets_;
  role_host<ems::mp_controller> controller_;
  std::map<std::string, std::unique_ptr<probe_endpoint>> peers_;
};

} // namespace

TEST(mp_controller_handover, the_target_goes_to_the_servers_and_clients_get_it_once_handed_over) {
  scripted_pool pool;
  pool.send("mp_server-0", pr::ems_ring_request{0});
  pool.send("mp_server-1", pr::ems_ring_request{0});
  pool.send("probe-0", pr::ems_ring_request{0}); // the client subscribes
  // mp_server-2 is slow to start: the ring settles with two of three (settle_ticks).
  ASSERT_TRUE(eventually(
      [&] { return pool.controller().locked([](ems::mp_controller& c) { return c.settled(); }); },
      10s));
  ASSERT_TRUE(eventually(
      [&] {
        return pool.view_of("probe-0") == names{"mp_server-0", "mp_server-1"};
      },
      10s));

  // mp_server-2 comes up after the pool settled: a change, not a ring of its own.
  pool.start("mp_server-2");
  pool.send("mp_server-2", pr::ems_ring_request{0});
  const names three{"mp_server-0", "mp_server-1", "mp_server-2"};
  ASSERT_TRUE(eventually([&] { return pool.target_of("mp_server-2").has_value(); }, 10s));
  const auto join = *pool.target_of("mp_server-2");
  EXPECT_EQ(join.servers, three);
  EXPECT_EQ(join.current_servers, (names{"mp_server-0", "mp_server-1"}));
  for (auto* s : {"mp_server-0", "mp_server-1"})
    ASSERT_TRUE(eventually([&] { return pool.target_of(s).has_value(); }, 5s)) << s;
  EXPECT_FALSE(pool.target_of("probe-0").has_value()) << "clients never see a target";
  pool.send("mp_server-0", pr::ems_handover_done{join.version, 40, 0});
  pool.send("mp_server-1",
            pr::ems_handover_done{join.version - 1, 0, 0}); // an older change's: ignored
  pool.send("mp_server-1", pr::ems_handover_done{join.version, 35, 0});
  // Until every server of both rings is done, clients keep the old ring.
  EXPECT_TRUE(eventually([&] { return pool.ring() == names{"mp_server-0", "mp_server-1"}; }, 1s));
  EXPECT_EQ(pool.view_of("probe-0"), (names{"mp_server-0", "mp_server-1"}));
  pool.send("mp_server-2", pr::ems_handover_done{join.version, 0, 0});
  ASSERT_TRUE(eventually([&] { return pool.view_of("probe-0") == three; }, 5s));
  EXPECT_EQ(pool.ring(), three);

  // Two leave together (a scale-down drains both at once); mp_server-2 never says it is done:
  // the ring is published at the hand-over timeout anyway.
  pool.send("mp_server-1", pr::ems_ring_request{0, true});
  pool.send("mp_server-2", pr::ems_ring_request{0, true});
  ASSERT_TRUE(eventually(
      [&] {
        auto t = pool.target_of("mp_server-0");
        return t && t->servers == names{"mp_server-0"};
      },
      5s));
  const auto leave = *pool.target_of("mp_server-0");
  EXPECT_EQ(leave.current_servers, three);
  EXPECT_GT(leave.version, join.version);
  pool.send("mp_server-0", pr::ems_handover_done{leave.version, 0, 0});
  pool.send("mp_server-1", pr::ems_handover_done{leave.version, 50, 0});
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_EQ(pool.view_of("probe-0"), three);
  ASSERT_TRUE(eventually([&] { return pool.view_of("probe-0") == names{"mp_server-0"}; }, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - asked, 1s) << "published before the timeout";
  // The leavers learn they are off from the same push.
  EXPECT_TRUE(eventually([&] { return pool.view_of("mp_server-2") == names{"mp_server-0"}; }, 5s));
  EXPECT_TRUE(eventually([&] { return pool.view_of("mp_server-1") == names{"mp_server-0"}; }, 5s));
}

TEST(ems_handover, a_pool_goes_from_two_to_three_to_one_server_keeping_every_block) {
  inproc_pool pool("ems-handover", 3, "", /*started=*/2);
  auto& client = pool.client();
  const names two{"mp_server-0", "mp_server-1"};
  ASSERT_TRUE(client.wait_for_ring([&](const auto& s) { return s == two; }, 10s));
  // Settled with two of three (the controller waits settle_ticks for the third), so the third
  // is a join.
  ASSERT_TRUE(eventually(
      [&] { return pool.controller().locked([](ems::mp_controller& c) { return c.settled(); }); },
      10s));
  const auto keys = numbered_keys(300);
  std::vector<std::vector<std::byte>> values;
  std::vector<ems::pool_put> items;
  for (size_t i = 0; i < keys.size(); ++i)
    values.push_back(value_of(4096, static_cast<unsigned>(i)));
  for (size_t i = 0; i < keys.size(); ++i) items.push_back({keys[i], values[i]});
  for (auto& o : client.put("ctx", items)) ASSERT_TRUE(o.stored) << o.error.str();

  auto every_block_at_its_owner = [&](const char* when) {
    auto session = pool.new_session(); // its first ring is the current one: owners only
    ASSERT_TRUE(session->client().wait_for_servers(10s));
    const auto got = session->client().get("ctx", keys);
    for (size_t i = 0; i < keys.size(); ++i)
      ASSERT_EQ(got.blocks[i], values[i]) << when << ": " << keys[i];
  };
  auto totals = [&](int server) { return pool.server(server).service().handover_counts(); };

  pool.start_server(2);
  const names three{"mp_server-0", "mp_server-1", "mp_server-2"};
  ASSERT_TRUE(client.wait_for_ring([&](const auto& s) { return s == three; }, 20s));
  every_block_at_its_owner("after mp_server-2 joined");
  EXPECT_TRUE(eventually([&] { return totals(2).blocks_in > 50; }, 5s)) << totals(2).blocks_in;
  EXPECT_EQ(totals(0).blocks_out + totals(1).blocks_out, totals(2).blocks_in);

  // A put that crossed the publish: sent with the older ring to mp_server-1, which has closed
  // its part of the join, for a block mp_server-2 now owns. It is acknowledged once there.
  std::string crossed;
  const auto ring_of_two = ems::ring_of(64, two), ring_of_three = ems::ring_of(64, three);
  for (int i = 0; crossed.empty(); ++i)
    if (auto k = "crossed-" + std::to_string(i); ring_of_two.owner("ctx", k) == "mp_server-1" &&
                                                 ring_of_three.owner("ctx", k) == "mp_server-2")
      crossed = k;
  const auto crossed_value = value_of(4096, 77);
  pr::ems_put late;
  late.ns = "ctx";
  late.keys = {crossed};
  late.sizes = {crossed_value.size()};
  late.data = transport::shared_bytes(std::vector<char>(
      reinterpret_cast<const char*>(crossed_value.data()),
      reinterpret_cast<const char*>(crossed_value.data()) + crossed_value.size()));
  // After mp_server-1 took the ring with three (its part of the join is over).
  ASSERT_TRUE(eventually(
      [&] { return pool.server(1).service().ring_version() >= client.ring_version(); }, 5s));
  const auto acked = ask<pr::ems_put_reply>(pool.client_endpoint(), "mp_server-1", late);
  ASSERT_TRUE(acked);
  ASSERT_EQ(acked->errors.size(), 1u);
  ASSERT_TRUE(acked->errors[0].ok()) << acked->errors[0];
  auto crossed_at_its_owner = [&](const char* when) {
    auto session = pool.new_session();
    ASSERT_TRUE(session->client().wait_for_servers(10s));
    EXPECT_EQ(session->client().get("ctx", std::vector<std::string>{crossed}).blocks.at(0),
              crossed_value)
        << when;
  };
  crossed_at_its_owner("acknowledged by mp_server-1 after the join");

  // Two drain at once: each is drained once the ring without it is published.
  for (int s : {1, 2}) pool.server(s).service().drain(services::drain_mode::migrate);
  ASSERT_TRUE(eventually(
      [&] { return pool.server(1).service().drained() && pool.server(2).service().drained(); },
      20s));
  // The client learns of the new ring from its own push, which may come after the servers'.
  EXPECT_TRUE(client.wait_for_ring([](const auto& s) { return s == names{"mp_server-0"}; }, 5s));
  pool.kill_server("mp_server-1");
  pool.kill_server("mp_server-2");
  every_block_at_its_owner("after mp_server-1 and -2 left");
  crossed_at_its_owner("after mp_server-1 and -2 left");
  EXPECT_EQ(totals(0).blocks_failed, 0u);
}

TEST(mp_controller_handover, a_server_that_lost_the_target_gets_it_again_until_it_answers) {
  scripted_pool pool;
  pool.send("mp_server-0", pr::ems_ring_request{0});
  pool.send("mp_server-1", pr::ems_ring_request{0});
  ASSERT_TRUE(eventually(
      [&] { return pool.controller().locked([](ems::mp_controller& c) { return c.settled(); }); },
      10s));
  pool.start("mp_server-2");
  pool.send("mp_server-2", pr::ems_ring_request{0});
  for (auto* s : {"mp_server-0", "mp_server-1", "mp_server-2"})
    ASSERT_TRUE(eventually([&] { return pool.target_of(s).has_value(); }, 10s)) << s;
  const auto join = *pool.target_of("mp_server-2");
  // mp_server-0 and -1 answer; mp_server-2's copy was lost (it restarted as it arrived).
  pool.send("mp_server-0", pr::ems_handover_done{join.version, 3, 0});
  pool.send("mp_server-1", pr::ems_handover_done{join.version, 4, 0});
  pool.forget_target("mp_server-2");
  pool.forget_target("mp_server-0");
  // Restarted, it asks for the ring: the view it gets is the published ring's, numbered below
  // the change (a server takes a view's version as published and would drop the resent target).
  pool.forget_view("mp_server-2");
  pool.send("mp_server-2", pr::ems_ring_request{0});
  ASSERT_TRUE(eventually([&] { return pool.last_view_of("mp_server-2").has_value(); }, 5s));
  EXPECT_LT(pool.last_view_of("mp_server-2")->version, join.version);
  EXPECT_EQ(pool.last_view_of("mp_server-2")->servers, (names{"mp_server-0", "mp_server-1"}));
  ASSERT_TRUE(eventually([&] { return pool.target_of("mp_server-2").has_value(); }, 5s))
      << "the change's target goes again to the server it still waits for";
  EXPECT_EQ(pool.target_of("mp_server-2")->version, join.version);
  pool.send("mp_server-2", pr::ems_handover_done{join.version, 0, 0});
  ASSERT_TRUE(eventually(
      [&] {
        return pool.ring() == names{"mp_server-0", "mp_server-1", "mp_server-2"};
      },
      5s));
  EXPECT_FALSE(pool.target_of("mp_server-0").has_value())
      << "a server that answered is not sent the target again";
}

TEST(mp_controller_handover,
     blocks_not_handed_over_are_planned_again_before_the_ring_is_published) {
  scripted_pool pool;
  pool.send("mp_server-0", pr::ems_ring_request{0});
  pool.send("mp_server-1", pr::ems_ring_request{0});
  pool.send("probe-0", pr::ems_ring_request{0});
  ASSERT_TRUE(eventually(
      [&] { return pool.controller().locked([](ems::mp_controller& c) { return c.settled(); }); },
      10s));
  const names two{"mp_server-0", "mp_server-1"}, three{"mp_server-0", "mp_server-1", "mp_server-2"};
  ASSERT_TRUE(eventually([&] { return pool.view_of("probe-0") == two; }, 10s));
  pool.start("mp_server-2");
  pool.send("mp_server-2", pr::ems_ring_request{0});
  for (auto* s : {"mp_server-0", "mp_server-1", "mp_server-2"})
    ASSERT_TRUE(eventually([&] { return pool.target_of(s).has_value(); }, 10s)) << s;
  const auto join = *pool.target_of("mp_server-2");
  for (auto* s : {"mp_server-0", "mp_server-1", "mp_server-2"}) pool.forget_target(s);
  // mp_server-0 could not reach the new server for 5 of its blocks (it had not heard of that
  // incarnation yet): publishing would leave those keys with an owner that lacks them.
  // mp_server-1 had 2 refused (a full tier): those alone would not hold the change.
  pool.send("mp_server-0", pr::ems_handover_done{join.version, 3, 5, 5});
  pool.send("mp_server-1", pr::ems_handover_done{join.version, 4, 2, 0});
  pool.send("mp_server-2", pr::ems_handover_done{join.version, 0, 0});
  for (auto* s : {"mp_server-0", "mp_server-1", "mp_server-2"})
    ASSERT_TRUE(eventually([&] { return pool.target_of(s).has_value(); }, 5s))
        << s << " was not asked to plan the change again";
  const auto again = *pool.target_of("mp_server-0");
  EXPECT_GT(again.version, join.version);
  EXPECT_EQ(again.servers, three);
  EXPECT_EQ(again.current_servers, two);
  EXPECT_EQ(pool.ring(), two) << "published with blocks not handed over";
  EXPECT_EQ(pool.view_of("probe-0"), two);
  // The next round reaches every owner; a refusal is not retried: now the ring goes out.
  for (auto* s : {"mp_server-0", "mp_server-1", "mp_server-2"}) pool.forget_target(s);
  for (auto* s : {"mp_server-0", "mp_server-2"})
    pool.send(s, pr::ems_handover_done{again.version, 5, 0, 0});
  pool.send("mp_server-1", pr::ems_handover_done{again.version, 4, 2, 0});
  ASSERT_TRUE(eventually([&] { return pool.view_of("probe-0") == three; }, 5s));
  EXPECT_EQ(pool.ring(), three);
  EXPECT_FALSE(pool.target_of("mp_server-1").has_value())
      << "a round of refusals was planned again";
}
