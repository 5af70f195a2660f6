#include "inbox.hpp"
#include "transport/control_messages.hpp"
#include "transport/endpoint.hpp"
#include "transport/plane_factory.hpp"

#include <gtest/gtest.h>

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
  auto a = std::make_unique<endpoint>(cluster, "alpha-0", make_plane, 11);
  auto b = std::make_unique<endpoint>(cluster, "beta-0", make_plane, 22);
  inbox ia, ib;
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

  // A request to beta fails as soon as beta is declared down (it stops ticking).
  std::string outcome;
  auto id = a->pending().add("beta-0", t + 10s,
                             [&](std::optional<envelope>, const std::string& e) { outcome = e; });
  ASSERT_TRUE(id);
  b->stop();
  // Heartbeats are stamped on arrival, so "61 ms from now" is past the 3 × 20 ms limit.
  a->tick(std::chrono::steady_clock::now() + 61ms);
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
