#include "../support/eventually.hpp"
#include "inbox.hpp"
#include "transport/control_messages.hpp"
#include "transport/endpoint.hpp"
#include "transport/plane_factory.hpp"

#include <condition_variable>
#include <filesystem>
#include <future>
#include <gtest/gtest.h>
#include <thread>
#include <unistd.h>

using namespace supernode::transport;
using namespace std::chrono_literals;
using supernode::testing::inbox;

namespace {

constexpr const char* two_instances = R"(
[cluster]
name = "endpoint-test"
heartbeat_ms = 20
missed_heartbeats = 3
[planes.local]
kind = "inproc"
[flows]
default = "local"
[process.a]
roles = ["alpha"]
[process.b]
roles = ["beta"]
)";

} // namespace

TEST(endpoint, messages_heartbeats_and_down_peers) {
  auto cluster = cluster_config::parse(two_instances, "two.toml");
  inbox ia, ib; // before the endpoints: their handlers write here until they end
  auto a = std::make_unique<endpoint>(cluster, "alpha-0", make_plane, 11);
  auto b = std::make_unique<endpoint>(cluster, "beta-0", make_plane, 22);
  ia.attach(*a);
  ib.attach(*b);
  a->start();
  b->start();

  ASSERT_EQ(a->send("control", "beta-0", make_envelope(ping{1, 0, {}})), send_status::ok);
  ASSERT_TRUE(ib.wait_for([&] { return ib.messages.size() == 1; }));
  EXPECT_EQ(ib.messages[0].first, "alpha-0");
  EXPECT_EQ(a->send("control", "gamma-0", make_envelope(ping{})), send_status::unknown_peer);

  // Heartbeats keep both alive; they are consumed by the endpoint, not delivered.
  auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    a->tick(t);
    b->tick(t);
  }
  ASSERT_TRUE(a->is_alive("beta-0"));
  std::unique_lock lock(ib.m);
  EXPECT_EQ(ib.messages.size(), 1u);
  lock.unlock();
  // Everything beta sent has reached alpha once this ping (same plane, in order) has: no late
  // heartbeat can revive beta after it is declared down below.
  ASSERT_EQ(b->send("control", "alpha-0", make_envelope(ping{2, 0, {}})), send_status::ok);
  ASSERT_TRUE(ia.wait_for([&] { return ia.count<ping>() == 1; }));

  // A request to beta fails as soon as beta is declared down (it stops ticking).
  std::string outcome;
  auto id = a->pending().add("beta-0", t + 10s,
                             [&](std::optional<envelope>, const std::string& e) { outcome = e; });
  ASSERT_TRUE(id);
  b->stop();
  // Heartbeats are stamped on arrival, so "61 ms from now" is past the 3 × 20 ms limit; alpha
  // ticks on the way there (a tick a whole limit after the last one means alpha itself was
  // paused, and declares nobody down).
  const auto stopped = std::chrono::steady_clock::now();
  a->tick(stopped + 30ms);
  a->tick(stopped + 61ms);
  // Wait for the down event itself: beta's first heartbeat (a new incarnation: "joined") may
  // reach alpha's plane thread only now, and come first.
  ASSERT_TRUE(ia.wait_for([&] {
    for (auto& e : ia.events)
      if (e.what == membership_event::kind::down && e.peer == "beta-0") return true;
    return false;
  }));
  EXPECT_NE(outcome.find("peer beta-0 is down"), std::string::npos) << outcome;
  EXPECT_EQ(a->send("control", "beta-0", make_envelope(ping{})), send_status::peer_down);
}

namespace {

constexpr const char* three_instances = R"(
[cluster]
name = "endpoint-forgery"
heartbeat_ms = 20
missed_heartbeats = 1000
[planes.local]
kind = "inproc"
[flows]
default = "local"
[process.a]
roles = ["alpha"]
[process.b]
roles = ["beta"]
[process.c]
roles = ["gamma"]
)";

// A reply type of this test's own: endpoints hand replies to the request that asked.
struct test_reply {
  static constexpr uint16_t type_id = 990;
  static constexpr const char* type_name = "test_reply";
  static constexpr uint32_t max_bytes = 256;
  uint64_t reply_to = 0;
  std::string text;
  MSGPACK_DEFINE_MAP(reply_to, text);
};

struct three_endpoints {
  cluster_config cluster = cluster_config::parse(three_instances, "three.toml");
  inbox alpha_mail; // before the endpoints: their handlers write here until they end
  endpoint alpha{cluster, "alpha-0", make_plane, 100}, beta{cluster, "beta-0", make_plane, 200},
      gamma{cluster, "gamma-0", make_plane, 300};
  three_endpoints() {
    register_message<test_reply>();
    alpha_mail.attach(alpha);
    for (auto* e : {&alpha, &beta, &gamma}) e->start();
  }
  uint64_t rejected(const std::string& reason) {
    const auto all = alpha.rejected_messages();
    auto it = all.find(reason);
    return it == all.end() ? 0 : it->second;
  }
  // Waits until alpha counted `n` rejections for `reason` (nothing is delivered to wake a
  // waiter: the count is the only trace).
  bool wait_rejected(const std::string& reason, uint64_t n) {
    return supernode::testing::eventually([&] { return rejected(reason) >= n; });
  }
};

} // namespace

TEST(endpoint, membership_messages_speak_only_for_their_sender) {
  three_endpoints t;
  // beta's heartbeat tells alpha beta's incarnation; the ping after it (same plane, in order)
  // says when alpha has taken it.
  t.beta.tick(std::chrono::steady_clock::now());
  t.beta.send("control", "alpha-0", make_envelope(ping{1, 0, {}}));
  ASSERT_TRUE(t.alpha_mail.wait_for([&] { return t.alpha_mail.count<ping>() == 1; }));

  // gamma speaks for beta: a leave, a heartbeat of a "restarted" beta, a join with its addresses.
  ASSERT_EQ(
      t.gamma.send("control", "alpha-0", make_envelope(member_leave{"beta-0", "forged", 200})),
      send_status::ok);
  ASSERT_TRUE(t.wait_rejected("leave_for_another", 1));
  t.gamma.send("control", "alpha-0", make_envelope(heartbeat{"beta-0", 999, 1}));
  ASSERT_TRUE(t.wait_rejected("heartbeat_for_another", 1));
  t.gamma.send("control", "alpha-0", make_envelope(member_join{"beta-0", "beta", 999, {}}));
  ASSERT_TRUE(t.wait_rejected("join_for_another", 1));
  // beta's own connection, but a leave of an earlier process of beta.
  t.beta.send("control", "alpha-0", make_envelope(member_leave{"beta-0", "stale", 150}));
  ASSERT_TRUE(t.wait_rejected("stale_incarnation", 1));

  EXPECT_TRUE(t.alpha.is_alive("beta-0"));
  {
    std::lock_guard lock(t.alpha_mail.m);
    for (auto& e : t.alpha_mail.events)
      EXPECT_NE(e.peer, "beta-0") << "a forged message moved beta's membership: " << e.reason;
  }
  // beta's real leave is taken.
  t.beta.announce_leave("done");
  ASSERT_TRUE(t.alpha_mail.wait_for([&] { return !t.alpha.is_alive("beta-0"); }));
}

TEST(endpoint, a_reply_counts_only_from_the_peer_asked) {
  three_endpoints t;
  std::promise<std::string> answer;
  auto id = t.alpha.pending().add("beta-0", std::chrono::steady_clock::now() + 10s,
                                  [&](std::optional<envelope> reply, const std::string& error) {
                                    answer.set_value(reply ? reply->get<test_reply>()->text
                                                           : "error: " + error);
                                  });
  ASSERT_TRUE(id);
  // Ids are small and guessable: gamma answers first.
  t.gamma.send("control", "alpha-0", make_envelope(test_reply{*id, "forged"}));
  ASSERT_TRUE(t.wait_rejected("reply_from_another", 1));
  t.beta.send("control", "alpha-0", make_envelope(test_reply{*id, "real"}));
  EXPECT_EQ(answer.get_future().get(), "real");
}

TEST(endpoint, a_member_declared_down_for_silence_is_fenced_and_told_so) {
  auto cluster = cluster_config::parse(two_instances, "two.toml");
  inbox ia; // before the endpoints: their handlers write here until they end
  endpoint a(cluster, "alpha-0", make_plane, 11), b(cluster, "beta-0", make_plane, 22);
  ia.attach(a);
  std::promise<std::string> fenced_by;
  b.set_fenced_handler([&](const std::string& by, const std::string&) { fenced_by.set_value(by); });
  a.start();
  b.start();
  // alpha learns beta's incarnation from a heartbeat (the ping after it says it was taken).
  b.tick(std::chrono::steady_clock::now());
  b.send("control", "alpha-0", make_envelope(ping{1, 0, {}}));
  ASSERT_TRUE(ia.wait_for([&] { return ia.count<ping>() == 1; }));
  // beta hangs: alpha declares it down after 3 × 20 ms of silence.
  a.tick(std::chrono::steady_clock::now() + 61ms);
  ASSERT_FALSE(a.is_alive("beta-0"));
  // It wakes: its messages are refused, and its next heartbeat is answered with the news.
  b.send("control", "alpha-0", make_envelope(ping{2, 0, {}}));
  b.tick(std::chrono::steady_clock::now());
  auto got = fenced_by.get_future();
  ASSERT_EQ(got.wait_for(20s), std::future_status::ready);
  EXPECT_EQ(got.get(), "alpha-0");
  EXPECT_GE(a.rejected_messages()["fenced_incarnation"], 2u); // the ping and the heartbeat
  {
    std::lock_guard lock(ia.m);
    EXPECT_EQ(ia.count<ping>(), 1u) << "a fenced incarnation's message reached the role";
  }
  EXPECT_FALSE(a.is_alive("beta-0"));
  // Restarted as a new incarnation, it is a member again.
  endpoint b2(cluster, "beta-0", make_plane, 23);
  b.stop();
  b2.start();
  b2.tick(std::chrono::steady_clock::now());
  ASSERT_TRUE(supernode::testing::eventually([&] { return a.is_alive("beta-0"); }));
}

namespace {
// Each message with the incarnation its receiver took its sender to be when it was delivered.
struct attributed_inbox {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::pair<uint64_t, uint64_t>> pings; // (ping id, sender's live incarnation)
  std::vector<membership_event> events;
  void attach(endpoint& e) {
    e.set_message_handler([this, &e](const peer_id& from, envelope msg) {
      std::lock_guard lock(m);
      if (auto* p = msg.get<ping>())
        pings.emplace_back(p->seq, e.live_incarnation(from).value_or(0));
      cv.notify_all();
    });
    e.set_event_handler([this](const membership_event& ev) {
      std::lock_guard lock(m);
      events.push_back(ev);
      cv.notify_all();
    });
  }
  template<class Pred>
  bool wait_for(Pred pred) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, 10s, pred);
  }
};
} // namespace

TEST(endpoint, a_restarted_members_first_message_waits_for_its_heartbeat) {
  auto cluster = cluster_config::parse(two_instances, "two.toml");
  attributed_inbox ia; // before the endpoints: their handlers write here until they end
  endpoint a(cluster, "alpha-0", make_plane, 11);
  ia.attach(a);
  a.start();
  {
    endpoint b(cluster, "beta-0", make_plane, 22);
    b.start();
    b.tick(std::chrono::steady_clock::now());
    b.send("control", "alpha-0", make_envelope(ping{1, 0, {}}));
    ASSERT_TRUE(ia.wait_for([&] { return ia.pings.size() == 1; }));
    // beta hangs, and alpha declares it down (and fences incarnation 22).
    a.tick(std::chrono::steady_clock::now() + 61ms);
    ASSERT_FALSE(a.is_alive("beta-0"));
  }
  // Its restart speaks before its first heartbeat. Taken as incarnation 22's, the ping would be
  // refused (or, after a dropped connection, revive the gone process): it waits instead.
  endpoint b2(cluster, "beta-0", make_plane, 23);
  b2.start();
  b2.send("control", "alpha-0", make_envelope(ping{2, 0, {}}));
  ASSERT_TRUE(supernode::testing::eventually([&] { return a.messages_held() == 1; }));
  b2.tick(std::chrono::steady_clock::now());
  ASSERT_TRUE(ia.wait_for([&] { return ia.pings.size() == 2; }));
  std::lock_guard lock(ia.m);
  EXPECT_EQ(ia.pings[1], std::make_pair(uint64_t{2}, uint64_t{23}))
      << "delivered before alpha knew which process sent it";
  EXPECT_EQ(a.rejected_messages().count("fenced_incarnation"), 0u);
  EXPECT_EQ(a.messages_held(), 0u);
  for (auto& e : ia.events)
    EXPECT_NE(e.reason, "a message arrived") << "a message revived a known incarnation";
}

TEST(endpoint, a_held_message_whose_sender_never_confirms_is_dropped_after_a_bound) {
  auto cluster = cluster_config::parse(two_instances, "two.toml");
  attributed_inbox ia;
  endpoint a(cluster, "alpha-0", make_plane, 11), b(cluster, "beta-0", make_plane, 22);
  ia.attach(a);
  a.start();
  b.start();
  b.tick(std::chrono::steady_clock::now());
  b.send("control", "alpha-0", make_envelope(ping{1, 0, {}}));
  ASSERT_TRUE(ia.wait_for([&] { return ia.pings.size() == 1; }));
  const auto hung = std::chrono::steady_clock::now();
  a.tick(hung + 30ms);
  a.tick(hung + 61ms);
  ASSERT_FALSE(a.is_alive("beta-0"));
  // A message alpha cannot attribute, and no heartbeat after it.
  b.send("control", "alpha-0", make_envelope(ping{2, 0, {}}));
  ASSERT_TRUE(supernode::testing::eventually([&] { return a.messages_held() == 1; }));
  a.tick(std::chrono::steady_clock::now() + 30ms);
  EXPECT_EQ(a.messages_held(), 1u); // within the bound it waits
  a.tick(std::chrono::steady_clock::now() + 61ms);
  EXPECT_EQ(a.messages_held(), 0u);
  EXPECT_EQ(a.rejected_messages()["unconfirmed_sender"], 1u);
  std::lock_guard lock(ia.m);
  EXPECT_EQ(ia.pings.size(), 1u);
}

TEST(endpoint, a_member_that_is_down_still_gets_heartbeats) {
  // Two live processes that each declared the other down (each saw the other's connection
  // drop) would, with heartbeats only to live members, never hear from each other again. Here
  // alpha declares beta down (silent since the start, so not fenced) and still heartbeats it:
  // beta learns alpha's incarnation from that heartbeat alone (beta itself sends nothing).
  auto cluster = cluster_config::parse(two_instances, "two.toml");
  inbox ia, ib; // before the endpoints: their handlers write here until they end
  endpoint a(cluster, "alpha-0", make_plane, 11), b(cluster, "beta-0", make_plane, 22);
  ia.attach(a);
  ib.attach(b);
  a.start();
  b.start();
  a.tick(std::chrono::steady_clock::now() + 61ms);
  ASSERT_FALSE(a.is_alive("beta-0"));
  ASSERT_FALSE(a.members().at("beta-0").fenced);
  EXPECT_TRUE(
      supernode::testing::eventually([&] { return b.members().at("alpha-0").incarnation == 11; }));
}

TEST(endpoint, only_the_plane_carrying_heartbeats_keeps_a_read_stamp) {
  // Liveness judges silence up to what the control flow's plane has read (plane::read_up_to);
  // the other planes keep no stamp, so their receive threads sleep until input.
  const auto run_dir =
      std::filesystem::temp_directory_path() / ("read-stamp-test-" + std::to_string(::getpid()));
  const auto cluster =
      cluster_config::parse("[cluster]\nname = \"read-stamp\"\nrun_dir = \"" + run_dir.string() +
                                "\"\n[planes.vpc]\nkind = \"zmq\"\n"
                                "[planes.rdma]\nkind = \"zmq\"\n"
                                "[flows]\ncontrol = \"vpc\"\nbulk = \"rdma\"\n"
                                "[process.a]\nroles = [\"alpha\"]\n",
                            "read-stamp.toml");
  const auto& self = cluster.instances().front();
  auto vpc = make_plane(cluster, cluster.planes.at("vpc"), self);
  auto rdma = make_plane(cluster, cluster.planes.at("rdma"), self);
  vpc->start();
  rdma->start();
  const auto later = std::chrono::steady_clock::now() + 1h;
  EXPECT_TRUE(supernode::testing::eventually(
      [&] { return vpc->read_up_to(later) > std::chrono::steady_clock::time_point{}; }));
  EXPECT_LT(vpc->read_up_to(later), later);
  EXPECT_EQ(rdma->read_up_to(later), later);
  vpc->stop();
  rdma->stop();
  std::filesystem::remove_all(run_dir);
}
