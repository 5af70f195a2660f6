#include "../support/eventually.hpp"
#include "plane_collector.hpp"
#include "transport/checksum.hpp"
#include "transport/control_messages.hpp"
#include "transport/zmq_plane.hpp"
#include "transport/zmq_util.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <future>
#include <gtest/gtest.h>
#include <mutex>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.hpp>

using namespace supernode::transport;
using supernode::testing::collector;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

std::string ipc_endpoint(const std::string& tag) {
  static std::atomic<int> next{0};
  return "ipc:///tmp/sn-zmq-test-" + std::to_string(getpid()) + "-" + std::to_string(next++) + "-" +
         tag + ".sock";
}

zmq_plane_options options_for(const std::string& self, bool ipc) {
  zmq_plane_options o;
  o.self = self;
  if (ipc) {
    o.control_endpoint = ipc_endpoint(self + "-control");
    o.bulk_endpoint = ipc_endpoint(self + "-bulk");
  }
  o.queue_bytes_limit = size_t{1} << 30;
  return o;
}

uint64_t fnv1a(const std::vector<char>& bytes) {
  return supernode::transport::fnv1a(bytes.data(), bytes.size());
}

std::vector<char> pattern(size_t n, uint64_t seed) {
  std::vector<char> out(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(out.data() + i, &x, 8);
  }
  return out;
}

// The echo peer of zmq_peer_main.cpp in its own process.
struct child_peer {
  pid_t pid = -1;
  peer_id id;
  std::string control, bulk;

  child_peer(const peer_id& self, zmq_plane& parent) : id(self) {
    control = ipc_endpoint(self + "-control");
    bulk = ipc_endpoint(self + "-bulk");
    std::vector<std::string> args = {SUPERNODE_ZMQ_PEER,
                                     self,
                                     control,
                                     bulk,
                                     parent.options().self,
                                     parent.control_endpoint(),
                                     parent.bulk_endpoint(),
                                     std::to_string(getpid())};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid = fork();
    if (pid == 0) {
      execv(argv[0], argv.data());
      _exit(127);
    }
    parent.connect(self, control, bulk);
  }
  // Reaps the child, killing it if it does not exit within `grace`; returns its wait status.
  int reap(std::chrono::milliseconds grace = 5s) {
    if (pid < 0) return -1;
    auto status = std::async(std::launch::async, [p = pid] {
      int s = 0;
      waitpid(p, &s, 0);
      return s;
    });
    if (status.wait_for(grace) != std::future_status::ready) kill(pid, SIGKILL);
    pid = -1;
    // A killed peer cannot remove its ipc files.
    std::filesystem::remove(control.substr(6));
    std::filesystem::remove(bulk.substr(6));
    return status.get();
  }
  ~child_peer() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      reap();
    }
  }
};

class zmq_plane_fixture : public ::testing::Test {
protected:
  void SetUp() override { register_control_messages(); }
};

void round_trip_every_message(bool ipc) {
  collector got; // outlives the plane, whose receive thread delivers into it
  zmq_plane a(options_for("rt-a", ipc)), b(options_for("rt-b", ipc));
  a.set_handler(got.handler());
  b.set_handler([&](const peer_id& from, envelope m) { b.send(from, std::move(m)); });
  a.connect("rt-b", b.control_endpoint(), b.bulk_endpoint());
  b.connect("rt-a", a.control_endpoint(), a.bulk_endpoint());
  a.start();
  b.start();
  if (!ipc) {
    EXPECT_TRUE(a.control_endpoint().starts_with("tcp://127.0.0.1:")) << a.control_endpoint();
    EXPECT_EQ(a.control_endpoint().find('*'), std::string::npos);
  }

  ASSERT_EQ(a.send("rt-b", make_envelope(ping{1, 2, {'p', 'i'}})), send_status::ok);
  ASSERT_EQ(a.send("rt-b", make_envelope(pong{3, 4, {'p', 'o'}})), send_status::ok);
  // 200 KiB: over the bulk threshold, so the bulk path is exercised too.
  auto data = pattern(200 << 10, 5);
  ASSERT_EQ(a.send("rt-b", make_envelope(bulk_chunk{9, 0, data.size(), data})), send_status::ok);
  ASSERT_EQ(a.send("rt-b", make_envelope(bulk_ack{9, 10, 11})), send_status::ok);
  ASSERT_EQ(a.send("rt-b", make_envelope(heartbeat{"rt-a", 7, 8})), send_status::ok);
  member_join join{"rt-a", "prefill", 42, {{"control", "ipc:///x"}, {"bulk", "ipc:///y"}}};
  ASSERT_EQ(a.send("rt-b", make_envelope(join)), send_status::ok);
  ASSERT_EQ(a.send("rt-b", make_envelope(member_leave{"rt-a", "drain"})), send_status::ok);

  auto* pi = got.wait_nth<ping>(1);
  ASSERT_TRUE(pi);
  EXPECT_EQ(pi->seq, 1u);
  EXPECT_EQ(pi->sent_ns, 2u);
  EXPECT_EQ(pi->payload, (std::vector<char>{'p', 'i'}));
  auto* po = got.wait_nth<pong>(1);
  ASSERT_TRUE(po);
  EXPECT_EQ(po->seq, 3u);
  EXPECT_EQ(po->payload, (std::vector<char>{'p', 'o'}));
  auto* chunk = got.wait_nth<bulk_chunk>(1);
  ASSERT_TRUE(chunk);
  EXPECT_EQ(chunk->transfer_id, 9u);
  EXPECT_EQ(chunk->total_bytes, data.size());
  EXPECT_TRUE(chunk->data == data);
  auto* ack = got.wait_nth<bulk_ack>(1);
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->checksum, 11u);
  auto* hb = got.wait_nth<heartbeat>(1);
  ASSERT_TRUE(hb);
  EXPECT_EQ(hb->sender, "rt-a");
  EXPECT_EQ(hb->incarnation, 7u);
  EXPECT_EQ(hb->seq, 8u);
  auto* j = got.wait_nth<member_join>(1);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->role, "prefill");
  EXPECT_EQ(j->endpoints, join.endpoints);
  auto* leave = got.wait_nth<member_leave>(1);
  ASSERT_TRUE(leave);
  EXPECT_EQ(leave->reason, "drain");
  {
    std::lock_guard lock(got.m);
    for (auto& [from, m] : got.messages) EXPECT_EQ(from, "rt-b");
  }
  EXPECT_EQ(a.counters().bad_frames.total(), 0u);
  EXPECT_EQ(b.counters().bad_frames.total(), 0u);
  EXPECT_EQ(a.counters().messages_sent.load(), 7u);
  EXPECT_EQ(a.counters().messages_received.load(), 7u);

  const std::string files[] = {a.control_endpoint(), a.bulk_endpoint(), b.control_endpoint(),
                               b.bulk_endpoint()};
  a.stop();
  a.stop(); // idempotent
  b.stop();
  EXPECT_EQ(a.send("rt-b", make_envelope(ping{})), send_status::closed);
  if (ipc) {
    for (auto& f : files) EXPECT_FALSE(std::filesystem::exists(f.substr(6))) << f << " left behind";
  }
}

} // namespace

// zmq binds to addresses and interface names only: a host name (a container's own, as
// "{process}" hosts give) is bound at the address it resolves to; the rest is left as it is.
TEST(zmq_bind, host_names_become_their_address_and_the_rest_stays) {
  using detail::bindable_endpoint;
  EXPECT_EQ(bindable_endpoint("tcp://localhost:7003"), "tcp://127.0.0.1:7003");
  EXPECT_EQ(bindable_endpoint("tcp://localhost:*"), "tcp://127.0.0.1:*");
  for (auto kept : {"tcp://127.0.0.1:7003", "tcp://*:*", "tcp://lo:7003", "ipc:///tmp/x.control",
                    "tcp://[::1]:7003"})
    EXPECT_EQ(bindable_endpoint(kept), kept);
}

TEST_F(zmq_plane_fixture, every_control_message_round_trips_over_ipc) {
  round_trip_every_message(true);
}
TEST_F(zmq_plane_fixture, every_control_message_round_trips_over_tcp) {
  round_trip_every_message(false);
}

TEST_F(zmq_plane_fixture, unknown_peer_before_connect_and_after_disconnect) {
  zmq_plane a(options_for("solo", true));
  a.start();
  EXPECT_EQ(a.send("nobody", make_envelope(ping{})), send_status::unknown_peer);
  a.connect("later", ipc_endpoint("nowhere"), ipc_endpoint("nowhere-bulk"));
  EXPECT_EQ(a.send("later", make_envelope(ping{})), send_status::ok);
  a.disconnect("later");
  EXPECT_EQ(a.send("later", make_envelope(ping{})), send_status::unknown_peer);
}

TEST_F(zmq_plane_fixture, what_it_has_read_up_to_stays_behind_while_its_receiver_is_busy) {
  // Liveness judges a peer's silence only up to what the receive thread has read: heartbeats
  // queued behind a busy (or starved) receiver do not make their sender look dead.
  using steady = std::chrono::steady_clock;
  std::promise<steady::time_point> entered;
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> received{0};
  auto heartbeats_plane = options_for("read-b", true);
  heartbeats_plane.read_stamp_interval = 50ms;
  zmq_plane a(options_for("read-a", true)), b(heartbeats_plane);
  b.set_handler([&](const peer_id&, envelope) {
    if (received++ == 0) {
      entered.set_value(steady::now());
      released.wait();
    }
  });
  a.set_handler([](const peer_id&, envelope) {});
  a.connect("read-b", b.control_endpoint(), b.bulk_endpoint());
  a.start();
  b.start();
  // Idle, it keeps up: within its stamp interval (50 ms) of now.
  EXPECT_TRUE(supernode::testing::eventually(
      [&] { return steady::now() - b.read_up_to(steady::now()) < 500ms; }));
  ASSERT_EQ(a.send("read-b", make_envelope(heartbeat{"read-a", 1, 1})), send_status::ok);
  auto entered_at = entered.get_future();
  ASSERT_EQ(entered_at.wait_for(20s), std::future_status::ready);
  const auto held_from = entered_at.get();
  ASSERT_EQ(a.send("read-b", make_envelope(heartbeat{"read-a", 1, 2})), send_status::ok);
  // Held in the handler: what it has read stays before the handler ran, however long it is
  // held.
  EXPECT_LE(b.read_up_to(held_from + 1h), held_from);
  release.set_value();
  EXPECT_TRUE(supernode::testing::eventually([&] { return received.load() == 2; }));
  EXPECT_TRUE(
      supernode::testing::eventually([&] { return b.read_up_to(steady::now()) > held_from; }));
  b.stop();
  a.stop();
}

TEST_F(zmq_plane_fixture, two_processes_echo_and_a_64_MiB_bulk_transfer) {
  collector got; // outlives the plane, whose receive thread delivers into it
  zmq_plane parent(options_for("parent", true));
  parent.set_handler(got.handler());
  parent.start();
  child_peer child("echo-1", parent);
  auto* hello = got.wait_nth<member_join>(1);
  ASSERT_TRUE(hello) << "the echo peer never announced itself";
  EXPECT_EQ(hello->endpoints.at("control"), child.control);

  ASSERT_EQ(parent.send(child.id, make_envelope(ping{17, 0, std::vector<char>(64, 'x')})),
            send_status::ok);
  auto* po = got.wait_nth<pong>(1);
  ASSERT_TRUE(po);
  EXPECT_EQ(po->seq, 17u);
  EXPECT_EQ(po->payload.size(), 64u);

  auto data = pattern(size_t{64} << 20, 1);
  const uint64_t expected = fnv1a(data);
  ASSERT_EQ(parent.send(child.id, make_envelope(bulk_chunk{1, 0, data.size(), std::move(data)})),
            send_status::ok);
  auto* ack = got.wait_nth<bulk_ack>(1, 30s);
  ASSERT_TRUE(ack) << "no bulk_ack for the 64 MiB transfer";
  EXPECT_EQ(ack->transfer_id, 1u);
  EXPECT_EQ(ack->received_bytes, size_t{64} << 20);
  EXPECT_EQ(ack->checksum, expected);

  ASSERT_EQ(parent.send(child.id, make_envelope(member_leave{"parent", "test over"})),
            send_status::ok);
  int status = child.reap();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(parent.counters().bad_frames.total(), 0u);
}

TEST_F(zmq_plane_fixture, a_ping_round_trip_completes_while_64_MiB_transfers_are_in_flight) {
  collector got; // outlives the plane, whose receive thread delivers into it
  zmq_plane parent(options_for("parent-hol", true));
  parent.set_handler(got.handler());
  parent.start();
  child_peer child("echo-hol", parent);
  ASSERT_TRUE(got.wait_nth<member_join>(1));

  constexpr int chunks = 3;
  for (int i = 0; i < chunks; ++i) {
    auto data = pattern(size_t{64} << 20, 10 + i);
    ASSERT_EQ(parent.send(child.id, make_envelope(bulk_chunk{uint64_t(100 + i), 0, data.size(),
                                                             std::move(data)})),
              send_status::ok);
  }
  const auto t0 = steady::now();
  ASSERT_EQ(parent.send(child.id, make_envelope(ping{1, 0, {}})), send_status::ok);
  ASSERT_TRUE(got.wait_nth<pong>(1));
  const auto ping_ms = std::chrono::duration<double, std::milli>(steady::now() - t0).count();
  size_t acks_before_pong;
  {
    std::lock_guard lock(got.m);
    acks_before_pong = got.count_locked<bulk_ack>();
  }
  EXPECT_LT(acks_before_pong, size_t{chunks}) << "the ping waited for the transfers";
  ASSERT_TRUE(got.wait_nth<bulk_ack>(chunks, 60s));
  const auto bulk_ms = std::chrono::duration<double, std::milli>(steady::now() - t0).count();
  std::printf("ping round trip %.2f ms while %d x 64 MiB took %.0f ms\n", ping_ms, chunks, bulk_ms);
  EXPECT_LT(ping_ms, bulk_ms / 2);
  parent.send(child.id, make_envelope(member_leave{"parent", "test over"}));
  child.reap();
}

TEST_F(zmq_plane_fixture, a_peer_killed_mid_transfer_is_reported_within_two_seconds) {
  collector got; // outlives the plane, whose receive thread delivers into it
  zmq_plane parent(options_for("parent-kill", true));
  std::promise<std::pair<peer_id, std::string>> dropped;
  std::once_flag once;
  parent.set_disconnect_handler([&](const peer_id& peer, const std::string& reason) {
    std::call_once(once, [&] { dropped.set_value({peer, reason}); });
  });
  parent.set_handler(got.handler());
  parent.start();
  child_peer child("echo-kill", parent);
  ASSERT_TRUE(got.wait_nth<member_join>(1));
  // The child's join says it reached us, not that we reached it: until both of our connections
  // to it are up, a death is nothing to notice (and a kill then raced the connect). A ping and a
  // small bulk chunk answered prove both paths are up, so the kill lands mid-transfer.
  ASSERT_EQ(parent.send(child.id, make_envelope(ping{1, 0, {}})), send_status::ok);
  ASSERT_TRUE(got.wait_nth<pong>(1));
  ASSERT_EQ(parent.send(child.id, make_envelope(bulk_chunk{100, 0, 8, pattern(8, 7)})),
            send_status::ok);
  ASSERT_TRUE(got.wait_nth<bulk_ack>(1));

  for (int i = 0; i < 3; ++i) {
    auto data = pattern(size_t{64} << 20, 20 + i);
    ASSERT_EQ(parent.send(child.id, make_envelope(bulk_chunk{uint64_t(200 + i), 0, data.size(),
                                                             std::move(data)})),
              send_status::ok);
  }
  ASSERT_EQ(kill(child.pid, SIGKILL), 0);
  const auto killed = steady::now();
  auto signal = dropped.get_future();
  ASSERT_EQ(signal.wait_for(5s), std::future_status::ready) << "no disconnect signal";
  const auto detect_ms = std::chrono::duration<double, std::milli>(steady::now() - killed).count();
  auto [peer, reason] = signal.get();
  std::printf("disconnect of %s seen after %.1f ms: %s\n", peer.c_str(), detect_ms, reason.c_str());
  EXPECT_EQ(peer, child.id);
  EXPECT_LT(detect_ms, 2000.0);
  // Until it connects again, what it sent before it died is no sign of life.
  EXPECT_TRUE(parent.link_down(child.id));
  EXPECT_FALSE(parent.link_down("never-seen"));

  const auto t0 = steady::now();
  EXPECT_EQ(parent.send(child.id, make_envelope(ping{})), send_status::peer_down);
  EXPECT_EQ(
      parent.send(child.id, make_envelope(bulk_chunk{300, 0, 1 << 20, std::vector<char>(1 << 20)})),
      send_status::peer_down);
  EXPECT_LT(steady::now() - t0, 100ms);
  int status = child.reap();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const auto t1 = steady::now();
  parent.stop();
  EXPECT_LT(steady::now() - t1, 1s) << "stop() waited for a dead peer";
}

TEST_F(zmq_plane_fixture, bad_frames_are_counted_and_the_connection_keeps_serving) {
  collector got; // outlives the plane, whose receive thread delivers into it
  zmq_plane a(options_for("judge", true));
  a.set_handler(got.handler());
  a.start();

  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::routing_id, "raw-sender");
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(a.control_endpoint());
  auto send_raw = [&](const std::vector<std::byte>& bytes) {
    raw.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::none);
  };
  auto encoded = [](const envelope& e) {
    auto b = e.encode();
    return std::vector<std::byte>(b.bytes().begin(), b.bytes().end());
  };
  size_t good = 0;
  auto serve_next_good_frame = [&] {
    send_raw(encoded(make_envelope(ping{++good, 0, {}})));
    auto* p = got.wait_nth<ping>(good);
    ASSERT_TRUE(p) << "the good frame after a bad one was not served";
    EXPECT_EQ(p->seq, good);
  };
  serve_next_good_frame();

  auto valid = encoded(make_envelope(ping{99, 0, std::vector<char>(32, 'x')}));
  auto truncated = valid;
  truncated.resize(valid.size() - 5);
  send_raw(truncated);
  serve_next_good_frame();

  std::vector<std::byte> garbage(100);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = std::byte(i * 31 + 7);
  send_raw(garbage);
  serve_next_good_frame();

  // A real ping over its 1 MiB limit.
  send_raw(encoded(make_envelope(ping{98, 0, std::vector<char>((1 << 20) + 1024, 'y')})));
  serve_next_good_frame();

  auto unknown = valid;
  unknown[6] = std::byte{0x99};
  unknown[7] = std::byte{0x7F};
  send_raw(unknown);
  serve_next_good_frame();

  auto wrong_version = valid;
  wrong_version[4] = std::byte{7};
  send_raw(wrong_version);
  serve_next_good_frame();

  // MessagePack that does not parse, then a two-part message.
  auto malformed = valid;
  malformed[frame_header_bytes] = std::byte{0xc1}; // never used in MessagePack
  send_raw(malformed);
  serve_next_good_frame();
  raw.send(zmq::buffer(valid.data(), valid.size()), zmq::send_flags::sndmore);
  raw.send(zmq::buffer(valid.data(), valid.size()), zmq::send_flags::none);
  serve_next_good_frame();

  const auto& bad = a.counters().bad_frames;
  EXPECT_EQ(bad.get(frame_error::truncated), 1u);
  EXPECT_EQ(bad.get(frame_error::bad_magic), 1u);
  EXPECT_EQ(bad.get(frame_error::oversized), 1u);
  EXPECT_EQ(bad.get(frame_error::unknown_type), 1u);
  EXPECT_EQ(bad.get(frame_error::wrong_version), 1u);
  EXPECT_EQ(bad.get(frame_error::malformed_payload), 1u);
  EXPECT_EQ(bad.get(frame_error::trailing_bytes), 1u);
  EXPECT_EQ(bad.total(), 7u);
  std::lock_guard lock(got.m);
  EXPECT_EQ(got.messages.size(), good);
  EXPECT_EQ(got.messages.back().first, "raw-sender");
}

TEST_F(zmq_plane_fixture, a_full_send_queue_answers_queue_full_at_once) {
  auto options = options_for("pusher", true);
  options.queue_limit = 4;
  zmq_plane a(options);
  a.start();
  // Nobody listens there: zmq holds the messages, so they stay queued.
  a.connect("silent", ipc_endpoint("silent-control"), ipc_endpoint("silent-bulk"));
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(a.send("silent", make_envelope(ping{uint64_t(i), 0, {}})), send_status::ok);
  const auto t0 = steady::now();
  EXPECT_EQ(a.send("silent", make_envelope(ping{4, 0, {}})), send_status::queue_full);
  EXPECT_EQ(a.send("silent", make_envelope(bulk_chunk{1, 0, 1 << 20, std::vector<char>(1 << 20)})),
            send_status::queue_full);
  EXPECT_LT(steady::now() - t0, 100ms);
  EXPECT_EQ(a.counters().queue_full.load(), 2u);
  EXPECT_EQ(a.counters().messages_sent.load(), 4u);

  // The byte bound: one large message is admitted, the next is not.
  auto bytes = options_for("pusher-bytes", true);
  bytes.queue_bytes_limit = 1 << 20;
  zmq_plane b(bytes);
  b.start();
  b.connect("silent", ipc_endpoint("silent2-control"), ipc_endpoint("silent2-bulk"));
  auto big = make_envelope(bulk_chunk{1, 0, 0, std::vector<char>(3 << 19)});
  EXPECT_EQ(b.send("silent", big), send_status::ok);
  EXPECT_EQ(b.send("silent", big), send_status::queue_full);
  EXPECT_EQ(b.send("silent", make_envelope(ping{})), send_status::queue_full);
}

// A received bulk_chunk references the bytes zmq received (no copy into a new buffer), and keeps
// them alive after the plane and its zmq context are gone (ASan builds check the reads).
TEST_F(zmq_plane_fixture, received_bulk_data_references_the_zmq_message_and_outlives_the_plane) {
  auto data = pattern(3 << 20, 21);
  envelope kept;
  {
    collector got;
    zmq_plane a(options_for("alias-a", true)), b(options_for("alias-b", true));
    b.set_handler(got.handler());
    a.connect("alias-b", b.control_endpoint(), b.bulk_endpoint());
    a.start();
    b.start();
    ASSERT_EQ(a.send("alias-b", make_envelope(bulk_chunk{1, 0, data.size(), data})),
              send_status::ok);
    auto* chunk = got.wait_nth<bulk_chunk>(1);
    ASSERT_TRUE(chunk);
    const auto& bytes = chunk->data;
    ASSERT_TRUE(bytes.owner());
    // A copy would own its bytes from their first byte; a reference owns the zmq message.
    ASSERT_NE(bytes.owner().get(), static_cast<const void*>(bytes.data())) << "the data was copied";
    const auto* message = static_cast<const zmq::message_t*>(bytes.owner().get());
    const auto* begin = static_cast<const char*>(message->data());
    EXPECT_GE(bytes.data(), begin);
    EXPECT_LE(bytes.data() + bytes.size(), begin + message->size());
    std::lock_guard lock(got.m);
    kept = got.messages.back().second;
  }
  ASSERT_TRUE(kept.get<bulk_chunk>());
  EXPECT_TRUE(kept.get<bulk_chunk>()->data == data);
  EXPECT_EQ(fnv1a(kept.get<bulk_chunk>()->data.to_vector()), fnv1a(data));
}

// What a sender may put in a multipart message: the parts of a spliced frame are served, any
// other split is a bad frame, counted, and the connection keeps serving.
TEST_F(zmq_plane_fixture, multipart_frames_are_judged_like_single_ones) {
  collector got; // outlives the plane, whose receive thread delivers into it
  zmq_plane a(options_for("parts", true));
  a.set_handler(got.handler());
  a.start();
  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::routing_id, "raw-parts");
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(a.bulk_endpoint());
  auto send_parts = [&](const std::vector<std::vector<std::byte>>& parts) {
    for (size_t i = 0; i < parts.size(); ++i)
      raw.send(zmq::buffer(parts[i].data(), parts[i].size()),
               i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  };
  auto parts_of = [](const envelope& e) {
    std::vector<std::vector<std::byte>> out;
    const auto frame = e.encode_spliced();
    for (auto piece : frame.pieces()) out.emplace_back(piece.begin(), piece.end());
    return out;
  };
  size_t good = 0;
  auto serve_next_good_frame = [&] {
    auto data = pattern(256 << 10, ++good);
    send_parts(parts_of(make_envelope(bulk_chunk{good, 0, data.size(), data})));
    auto* c = got.wait_nth<bulk_chunk>(good);
    ASSERT_TRUE(c) << "the good frame after a bad one was not served";
    EXPECT_TRUE(c->data == data);
  };
  serve_next_good_frame();

  const auto valid = parts_of(make_envelope(bulk_chunk{99, 0, 1 << 20, pattern(1 << 20, 9)}));
  ASSERT_EQ(valid.size(), 2u);
  auto extra = valid;
  extra.push_back(valid[1]);
  send_parts(extra);
  serve_next_good_frame();

  auto cut = valid;
  cut[1].resize(1000);
  send_parts(cut);
  serve_next_good_frame();

  auto shifted = valid;
  shifted[1].insert(shifted[1].begin(), shifted[0].back());
  shifted[0].pop_back();
  send_parts(shifted);
  serve_next_good_frame();

  const auto& bad = a.counters().bad_frames;
  EXPECT_EQ(bad.get(frame_error::trailing_bytes), 1u);
  EXPECT_EQ(bad.get(frame_error::truncated), 1u);
  EXPECT_EQ(bad.get(frame_error::malformed_payload), 1u);
  EXPECT_EQ(bad.total(), 3u);
  std::lock_guard lock(got.m);
  EXPECT_EQ(got.messages.size(), good);
}
