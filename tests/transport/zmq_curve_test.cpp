// CurveZMQ on the zmq plane: planes holding the cluster's keys talk over ipc and tcp, and
// whoever does not hold an instance's key — or holds one but claims to be another instance —
// is refused, counted and never delivered, while the real planes keep talking.

#include "../support/eventually.hpp"
#include "plane_collector.hpp"
#include "transport/cluster_keys.hpp"
#include "transport/control_messages.hpp"
#include "transport/zmq_plane.hpp"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zmq.hpp>

using namespace supernode::transport;
using supernode::testing::collector;
using supernode::testing::eventually;
using namespace std::chrono_literals;

namespace {

std::vector<std::byte> encoded(const envelope& e) {
  auto b = e.encode();
  return {b.bytes().begin(), b.bytes().end()};
}

class zmq_curve : public ::testing::TestWithParam<bool /*ipc*/> {
protected:
  void SetUp() override {
    register_control_messages();
    static std::atomic<int> next{0};
    root_ = std::filesystem::temp_directory_path() /
            ("sn-curve-test-" + std::to_string(getpid()) + "-" + std::to_string(next++));
    keys_ = std::make_shared<cluster_keys>(root_ / "keys");
    keys_->ensure({"curve-a", "curve-b"});
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  zmq_plane_options options(const std::string& self) const {
    zmq_plane_options o;
    o.self = self;
    o.keys = keys_;
    if (GetParam()) {
      o.control_endpoint = "ipc://" + (root_ / (self + ".control")).string();
      o.bulk_endpoint = "ipc://" + (root_ / (self + ".bulk")).string();
    }
    return o;
  }

  std::filesystem::path root_;
  std::shared_ptr<cluster_keys> keys_;
};

// Two secured planes; b answers every ping with a pong carrying the same payload.
struct secured_pair {
  // The collectors first: members go in reverse order, so the planes' threads stop before the
  // collectors they deliver into.
  collector at_a, at_b;
  zmq_plane a, b;
  uint64_t next_seq = 1;

  secured_pair(zmq_plane_options oa, zmq_plane_options ob) : a(std::move(oa)), b(std::move(ob)) {
    a.set_handler(at_a.handler());
    b.set_handler([this](const peer_id& from, envelope m) {
      if (auto* p = m.get<ping>()) b.send(from, make_envelope(pong{p->seq, 0, p->payload}));
      at_b.handler()(from, std::move(m));
    });
    a.connect("curve-b", b.control_endpoint(), b.bulk_endpoint());
    b.connect("curve-a", a.control_endpoint(), a.bulk_endpoint());
    a.start();
    b.start();
  }
  // One ping from a to b and its pong back; true when the pong came.
  bool round_trip() {
    const uint64_t seq = next_seq++;
    if (a.send("curve-b", make_envelope(ping{seq, 0, {'o', 'k'}})) != send_status::ok) return false;
    const auto* p = at_a.wait_nth<pong>(seq);
    return p && p->seq == seq;
  }
};

// A raw DEALER toward `endpoint` that connects once (no reconnects: one handshake attempt).
zmq::socket_t intruder(zmq::context_t& ctx, const std::string& routing_id) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::routing_id, routing_id);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::reconnect_ivl, -1);
  return s;
}

} // namespace

TEST_P(zmq_curve, planes_holding_the_cluster_keys_exchange_control_and_bulk_messages) {
  secured_pair p(options("curve-a"), options("curve-b"));
  ASSERT_TRUE(p.round_trip());
  std::vector<char> data(200 << 10, 'k'); // over the bulk threshold: the bulk path is secured too
  ASSERT_EQ(p.b.send("curve-a", make_envelope(bulk_chunk{7, 0, data.size(), data})),
            send_status::ok);
  const auto* chunk = p.at_a.wait_nth<bulk_chunk>(1);
  ASSERT_TRUE(chunk);
  EXPECT_TRUE(chunk->data == data);
  {
    std::lock_guard lock(p.at_a.m);
    for (auto& [from, m] : p.at_a.messages) EXPECT_EQ(from, "curve-b");
  }
  {
    std::lock_guard lock(p.at_b.m);
    for (auto& [from, m] : p.at_b.messages) EXPECT_EQ(from, "curve-a");
  }
  for (auto* plane : {&p.a, &p.b}) {
    EXPECT_EQ(plane->counters().handshakes_refused.load(), 0u);
    EXPECT_EQ(plane->counters().identity_mismatch.load(), 0u);
  }
}

TEST_P(zmq_curve, strangers_and_impostors_are_refused_counted_and_never_delivered) {
  secured_pair p(options("curve-a"), options("curve-b"));
  ASSERT_TRUE(p.round_trip());
  const auto server_key = *keys_->public_key("curve-a");
  const auto message = encoded(make_envelope(ping{9001, 0, {'x'}}));
  zmq::context_t ctx(1);
  auto send_message = [&](zmq::socket_t& s) {
    s.send(zmq::buffer(message.data(), message.size()), zmq::send_flags::dontwait);
  };
  const auto& counters = p.a.counters();

  // No CURVE at all, claiming to be curve-b: the handshake fails on the mechanism.
  auto plain = intruder(ctx, "curve-b");
  plain.connect(p.a.control_endpoint());
  send_message(plain);
  EXPECT_TRUE(eventually([&] { return counters.handshakes_refused.load() >= 1; }));
  EXPECT_TRUE(p.round_trip());

  // CURVE with a key pair of no instance: the ZAP handler answers 400.
  auto stranger = intruder(ctx, "curve-b");
  const auto random_pair = make_curve_keypair();
  stranger.set(zmq::sockopt::curve_serverkey, server_key);
  stranger.set(zmq::sockopt::curve_publickey, random_pair.public_key);
  stranger.set(zmq::sockopt::curve_secretkey, random_pair.secret_key);
  stranger.connect(p.a.control_endpoint());
  send_message(stranger);
  EXPECT_TRUE(eventually([&] { return counters.handshakes_refused.load() >= 2; }));
  EXPECT_TRUE(p.round_trip());

  // curve-a's real key, claiming to be curve-b: the connection is let in (the key is the
  // cluster's), every message on it dropped; curve-b's own connection is not disturbed.
  auto impostor = intruder(ctx, "curve-b");
  const auto a_pair = keys_->own("curve-a");
  impostor.set(zmq::sockopt::curve_serverkey, server_key);
  impostor.set(zmq::sockopt::curve_publickey, a_pair.public_key);
  impostor.set(zmq::sockopt::curve_secretkey, a_pair.secret_key);
  impostor.connect(p.a.control_endpoint());
  send_message(impostor);
  send_message(impostor);
  EXPECT_TRUE(eventually([&] { return counters.identity_mismatch.load() >= 2; }));
  EXPECT_TRUE(p.round_trip());
  EXPECT_TRUE(p.round_trip());

  // One count per refused attempt, one per dropped message, nothing else.
  EXPECT_EQ(counters.handshakes_refused.load(), 2u);
  EXPECT_EQ(counters.identity_mismatch.load(), 2u);
  EXPECT_EQ(p.b.counters().handshakes_refused.load(), 0u);
  EXPECT_EQ(p.b.counters().identity_mismatch.load(), 0u);
  std::lock_guard lock(p.at_a.m);
  EXPECT_EQ(p.at_a.count_locked<ping>(), 0u) << "an intruder's ping was delivered";
  for (auto& [from, m] : p.at_a.messages) EXPECT_EQ(from, "curve-b");
}

TEST_P(zmq_curve, a_peer_without_a_public_key_cannot_be_connected_to) {
  zmq_plane a(options("curve-a"));
  a.start();
  a.connect("curve-c", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"); // no curve-c.public
  EXPECT_EQ(a.send("curve-c", make_envelope(ping{})), send_status::unknown_peer);
  // A plane whose own key pair is missing refuses to start unsecured.
  EXPECT_ANY_THROW(zmq_plane(options("curve-c")));
}

INSTANTIATE_TEST_SUITE_P(transports, zmq_curve, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "ipc" : "tcp"; });
