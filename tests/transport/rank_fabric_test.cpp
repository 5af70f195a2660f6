// The rank fabric, over shared memory and over ZeroMQ (ipc and tcp): ranks are threads of this
// process, each with its own fabric object, exactly as separate processes would hold them. Every
// wait has a deadline; nothing sleeps to synchronise (a barrier keeps all ranks alive until every
// rank is done, so a peer's departure never races a check).

#include "../support/eventually.hpp"
#include "../support/sanitizer_slowdown.hpp"
#include "transport/cluster_keys.hpp"
#include "transport/free_ports.hpp"
#include "transport/rank_fabric.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <gtest/gtest.h>
#include <limits>
#include <stdexcept>
#include <thread>
#include <unistd.h>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

using supernode::testing::scaled;
using namespace supernode::transport;
using supernode::testing::eventually;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

enum class fabric_kind { shm, zmq_ipc, zmq_tcp };

std::string kind_name(fabric_kind k) {
  switch (k) {
  case fabric_kind::shm:
    return "shm";
  case fabric_kind::zmq_ipc:
    return "zmq_ipc";
  case fabric_kind::zmq_tcp:
    return "zmq_tcp";
  }
  return "?";
}

// Names the parameter in ctest's test list (gtest would print the enum's bytes).
void PrintTo(fabric_kind k, std::ostream* os) {
  *os << kind_name(k);
}

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v[i] = static_cast<std::byte>(x);
  }
  return v;
}

bool all_zero(const std::byte* p, size_t n) {
  return std::all_of(p, p + n, [](std::byte b) { return b == std::byte{0}; });
}

// One group's configuration: every rank builds its fabric from the same spec.
struct group_spec {
  fabric_kind kind;
  std::string cluster, group;
  int ranks;
  size_t bytes, flags;
  std::vector<std::string> addresses;
  std::shared_ptr<const cluster_keys> keys; // zmq: CURVE with these, instances by rank
  std::vector<std::string> instances;

  rank_fabric_options options(int rank) const {
    rank_fabric_options o;
    o.cluster = cluster;
    o.group = group;
    o.rank = rank;
    o.ranks = ranks;
    o.bytes = bytes;
    o.flags = flags;
    o.addresses = addresses;
    o.keys = keys;
    o.instances = instances;
    return o;
  }
  std::unique_ptr<rank_fabric> make(int rank) const { return make(options(rank)); }
  std::unique_ptr<rank_fabric> make(const rank_fabric_options& o) const {
    return kind == fabric_kind::shm ? make_shm_rank_fabric(o) : make_zmq_rank_fabric(o);
  }
};

// The zmq fabric's wire format (see zmq_rank_fabric.cpp), for the tests that play a misbehaving
// rank with a raw socket.
namespace wire {
struct tail {
  uint32_t magic = 0x46524E53;
  uint8_t kind = 0;
  uint8_t ack = 0;
  uint16_t zero = 0;
  uint64_t a = 0, b = 0, c = 0;
};
static_assert(sizeof(tail) == 32);
constexpr uint8_t hello = 1, writes = 2, add = 3, leaving = 4;

zmq::message_t tail_part(uint8_t kind, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0) {
  tail t;
  t.kind = kind;
  t.a = a;
  t.b = b;
  t.c = c;
  return zmq::message_t(&t, sizeof t);
}

zmq::message_t write_part(uint64_t offset, std::span<const std::byte> data) {
  zmq::message_t m(sizeof offset + data.size());
  std::memcpy(m.data(), &offset, sizeof offset);
  if (!data.empty())
    std::memcpy(static_cast<char*>(m.data()) + sizeof offset, data.data(), data.size());
  return m;
}

void send(zmq::socket_t& s, std::vector<zmq::message_t> parts) {
  ASSERT_TRUE(zmq::send_multipart(s, parts));
}

void send_one(zmq::socket_t& s, zmq::message_t tail_part) {
  std::vector<zmq::message_t> m;
  m.push_back(std::move(tail_part));
  send(s, std::move(m));
}
} // namespace wire

class rank_fabric_test : public ::testing::TestWithParam<fabric_kind> {
protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "rank_fabric.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  bool is_zmq() const { return GetParam() != fabric_kind::shm; }

  group_spec spec(int ranks, size_t bytes, size_t flags) {
    static std::atomic<int> groups{0};
    const int n = groups++;
    group_spec g{GetParam(),
                 "rf" + std::to_string(::getpid()) + "_" + std::to_string(n),
                 "g" + std::to_string(n),
                 ranks,
                 bytes,
                 flags,
                 {},
                 nullptr,
                 {}};
    // Below the ephemeral range (free_ports.hpp says why): a port drawn by binding port 0 was
    // once taken by a rank's own reconnecting DEALER, which then talked to itself.
    const int base = GetParam() == fabric_kind::zmq_tcp ? free_tcp_port_range(ranks, n) : 0;
    for (int r = 0; r < ranks; ++r) {
      if (GetParam() == fabric_kind::zmq_ipc)
        g.addresses.push_back("ipc://" + (dir_ / (g.group + "-" + std::to_string(r))).string());
      else
        g.addresses.push_back("tcp://127.0.0.1:" + std::to_string(base + r));
    }
    return g;
  }

  // Every rank a thread: construct, connect, then `body`, then stay until every rank is done.
  void run_group(const group_spec& g, const std::function<void(rank_fabric&)>& body) {
    std::barrier sync(g.ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < g.ranks; ++r)
      threads.emplace_back([&, r] {
        std::unique_ptr<rank_fabric> f;
        try {
          f = g.make(r);
          std::string why;
          if (!f->connect(
                  20s, [] { return false; }, why)) {
            ADD_FAILURE() << "rank " << r << ": " << why;
            f.reset();
          }
        } catch (const std::exception& e) {
          ADD_FAILURE() << "rank " << r << ": " << e.what();
          f.reset();
        }
        sync.arrive_and_wait();
        if (f) {
          try {
            body(*f);
          } catch (const std::exception& e) {
            ADD_FAILURE() << "rank " << r << " threw: " << e.what();
          }
        }
        sync.arrive_and_wait();
      });
    for (auto& t : threads) t.join();
  }

  std::filesystem::path dir_;
};

TEST_P(rank_fabric_test, connects_groups_of_2_4_and_8) {
  for (int ranks : {2, 4, 8}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    std::atomic<int> connected{0};
    run_group(spec(ranks, 4096, 4), [&](rank_fabric& f) {
      EXPECT_EQ(f.ranks(), ranks);
      EXPECT_EQ(f.bytes(), 4096u);
      EXPECT_EQ(f.flags(), 4u);
      EXPECT_EQ(f.peer_failure(), "");
      EXPECT_EQ(reinterpret_cast<uintptr_t>(f.local()) % 64, 0u);
      EXPECT_TRUE(all_zero(f.local(), f.bytes()));
      ++connected;
    });
    EXPECT_EQ(connected.load(), ranks);
  }
}

TEST_P(rank_fabric_test, connect_times_out_naming_the_rank_that_never_started) {
  const auto g = spec(3, 1024, 2); // rank 2 never starts
  std::vector<std::string> why(2);
  std::array<bool, 2> ok{true, true}; // not vector<bool>: two threads write it
  std::vector<clock_type::duration> took(2);
  std::barrier sync(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto f = g.make(r);
      const auto start = clock_type::now();
      ok[r] = f->connect(
          1s, [] { return false; }, why[r]);
      took[r] = clock_type::now() - start;
      sync.arrive_and_wait(); // neither goes away while the other still talks to it
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(ok[r]);
    EXPECT_NE(why[r].find("rank(s) 2"), std::string::npos) << why[r];
    EXPECT_EQ(why[r].find("rank(s) 1"), std::string::npos) << why[r];
    EXPECT_EQ(why[r].find("rank(s) 0"), std::string::npos) << why[r];
    EXPECT_GE(took[r], 1s);
  }
}

TEST_P(rank_fabric_test, connect_gives_up_when_asked) {
  const auto g = spec(2, 1024, 2);
  auto f = g.make(0);
  std::string why;
  const auto start = clock_type::now();
  int calls = 0;
  EXPECT_FALSE(f->connect(
      scaled(30s), [&] { return ++calls > 3; }, why));
  EXPECT_LT(clock_type::now() - start, 5s);
  EXPECT_NE(why.find("rank(s) 1"), std::string::npos) << why;
  EXPECT_THROW(f->write(1, 0, pattern(8, 1)), std::logic_error) << "not connected";
}

TEST_P(rank_fabric_test, connect_rejects_a_differently_configured_peer) {
  auto g = spec(2, 4096, 2);
  std::vector<std::string> why(2);
  std::array<bool, 2> ok{true, true}; // not vector<bool>: two threads write it
  std::barrier sync(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto o = g.options(r);
      if (r == 1) o.bytes += 64;
      auto f = g.make(o);
      ok[r] = f->connect(
          scaled(10s), [] { return false; }, why[r]);
      sync.arrive_and_wait();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(ok[r]);
    EXPECT_NE(why[r].find("configured differently"), std::string::npos) << why[r];
  }
}

// Every rank writes a distinct pattern into every region (its own included), each sender at its
// own offset with its own length, in two writes, then bumps the target's flag once.
TEST_P(rank_fabric_test, all_to_all_writes_are_visible_after_the_flag) {
  constexpr int ranks = 4;
  constexpr size_t slot = 24 * 1024;
  auto length = [](int from) { return slot - 1000 * static_cast<size_t>(from) - 8; };
  auto seed = [](int from, int to) { return 1000u * from + to + 1; };
  run_group(spec(ranks, ranks * slot, 2), [&](rank_fabric& f) {
    const int me = f.rank();
    uint64_t sent_to_peers = 0;
    for (int to = 0; to < ranks; ++to) {
      const auto data = pattern(length(me), seed(me, to));
      const size_t half = data.size() / 2;
      f.write(to, me * slot, std::span(data).first(half));
      f.write(to, me * slot + half, std::span(data).subspan(half));
      f.add(to, 0, 1);
      if (to != me) sent_to_peers += data.size();
    }
    EXPECT_EQ(f.bytes_sent(), sent_to_peers);
    ASSERT_TRUE(f.wait(0, ranks, scaled(10s))) << "flag " << f.load(0);
    EXPECT_EQ(f.load(0), static_cast<uint64_t>(ranks));
    EXPECT_EQ(f.load(1), 0u);
    for (int from = 0; from < ranks; ++from) {
      const auto want = pattern(length(from), seed(from, me));
      const std::byte* at = f.local() + from * slot;
      EXPECT_EQ(std::memcmp(at, want.data(), want.size()), 0) << "from rank " << from;
      EXPECT_TRUE(all_zero(at + want.size(), slot - want.size())) << "past rank " << from;
    }
  });
}

// Larger than the zmq fabric's 256 KiB parts, at an odd offset: split, flushed early, reassembled.
TEST_P(rank_fabric_test, a_write_larger_than_one_part_arrives_whole) {
  constexpr size_t bytes = 3 * 1024 * 1024 + 100;
  const auto data = pattern(3 * 1024 * 1024 + 17, 99);
  run_group(spec(2, bytes, 1), [&](rank_fabric& f) {
    if (f.rank() == 0) {
      f.write(1, 50, data);
      f.add(1, 0, 1);
      return;
    }
    ASSERT_TRUE(f.wait(0, 1, scaled(10s)));
    EXPECT_TRUE(all_zero(f.local(), 50));
    EXPECT_EQ(std::memcmp(f.local() + 50, data.data(), data.size()), 0);
    EXPECT_TRUE(all_zero(f.local() + 50 + data.size(), bytes - 50 - data.size()));
  });
}

// The writer fills slot n % window with n (in two writes) and bumps the reader's flag; the reader
// waits for flag >= n and checks the whole slot holds n, then acknowledges. Up to `window`
// rounds are in flight, so a flag that overtook its data would show an older sequence number.
TEST_P(rank_fabric_test, flags_are_never_observed_before_their_data) {
  const uint64_t rounds = is_zmq() ? 2000 : 20000;
  constexpr size_t words = 2048, window = 4;
  constexpr size_t block = words * sizeof(uint64_t);
  std::atomic<uint64_t> checked{0};
  run_group(spec(2, window * block, 2), [&](rank_fabric& f) {
    if (f.rank() == 0) {
      std::vector<uint64_t> buf(words);
      for (uint64_t n = 1; n <= rounds; ++n) {
        // Slot n % window was last read in round n - window: wait for that acknowledgement.
        if (n > window) {
          ASSERT_TRUE(f.wait(1, n - window, scaled(10s))) << "round " << n;
        }
        std::fill(buf.begin(), buf.end(), n);
        const auto bytes = std::as_bytes(std::span(buf));
        const size_t at = (n % window) * block;
        f.write(1, at, bytes.first(block / 2));
        f.write(1, at + block / 2, bytes.subspan(block / 2));
        f.add(1, 0, 1);
      }
      ASSERT_TRUE(f.wait(1, rounds, scaled(10s)));
      return;
    }
    for (uint64_t n = 1; n <= rounds; ++n) {
      ASSERT_TRUE(f.wait(0, n, scaled(10s))) << "round " << n;
      const std::byte* at = f.local() + (n % window) * block;
      for (size_t i = 0; i < words; ++i) {
        uint64_t v;
        std::memcpy(&v, at + i * sizeof v, sizeof v);
        if (v != n) FAIL() << "round " << n << ": word " << i << " holds " << v;
      }
      ++checked;
      f.add(0, 1, 1);
    }
  });
  EXPECT_EQ(checked.load(), rounds);
}

// Far more than the zmq queues hold, sent without waiting: the sender is held back until the
// receiver catches up, and nothing is lost or reordered.
TEST_P(rank_fabric_test, a_flood_is_flow_controlled_not_dropped) {
  constexpr size_t words = 8192, bytes = words * sizeof(uint64_t);
  constexpr uint64_t messages = 2000;
  run_group(spec(2, bytes, 1), [&](rank_fabric& f) {
    if (f.rank() == 0) {
      // A cheap fill, so the sender outruns the wire and really meets a full queue.
      std::vector<uint64_t> buf(words);
      for (uint64_t n = 1; n <= messages; ++n) {
        std::fill(buf.begin(), buf.end(), n);
        f.write(1, 0, std::as_bytes(std::span(buf)));
        f.add(1, 0, 1);
      }
      EXPECT_EQ(f.bytes_sent(), messages * bytes);
      return;
    }
    ASSERT_TRUE(f.wait(0, messages, scaled(30s))) << "flag " << f.load(0);
    EXPECT_EQ(f.load(0), messages);
    std::vector<uint64_t> last(words, messages);
    EXPECT_EQ(std::memcmp(f.local(), last.data(), bytes), 0);
  });
}

TEST_P(rank_fabric_test, writes_outside_the_region_throw_and_change_nothing) {
  constexpr size_t bytes = 4096;
  run_group(spec(2, bytes, 2), [&](rank_fabric& f) {
    if (f.rank() == 0) {
      const auto two = pattern(2, 1);
      for (int to : {0, 1}) {
        try {
          f.write(to, bytes - 1, two);
          ADD_FAILURE() << "no exception for rank " << to;
        } catch (const std::out_of_range& e) {
          EXPECT_NE(std::string(e.what()).find("4095"), std::string::npos) << e.what();
        }
        EXPECT_THROW(f.write(to, bytes + 1, {}), std::out_of_range);
        EXPECT_THROW(f.write(to, std::numeric_limits<size_t>::max(), two), std::out_of_range);
        EXPECT_THROW(f.add(to, 2, 1), std::out_of_range);
      }
      EXPECT_THROW(f.write(2, 0, two), std::out_of_range);
      EXPECT_THROW(f.write(-1, 0, two), std::out_of_range);
      EXPECT_THROW(f.add(2, 0, 1), std::out_of_range);
      EXPECT_EQ(f.bytes_sent(), 0u);
      EXPECT_TRUE(all_zero(f.local(), bytes));
      // Exactly at the end is fine, and the fabric is still usable.
      f.write(1, bytes - 2, two);
      f.add(1, 0, 1);
      return;
    }
    ASSERT_TRUE(f.wait(0, 1, scaled(10s)));
    EXPECT_TRUE(all_zero(f.local(), bytes - 2));
    EXPECT_EQ(std::memcmp(f.local() + bytes - 2, pattern(2, 1).data(), 2), 0);
  });
}

TEST_P(rank_fabric_test, a_rank_that_leaves_is_named_by_its_peers) {
  run_group(spec(3, 1024, 1), [&](rank_fabric& f) {
    if (f.rank() == 1) {
      f.leave();
      f.leave(); // idempotent
      return;
    }
    EXPECT_TRUE(eventually([&] { return !f.peer_failure().empty(); }));
    EXPECT_EQ(f.peer_failure(), "rank 1 left the group");
  });
}

// The same members re-forming under the same group name after a break: each rank drops its
// old fabric and makes a new one when it notices, so one rank's new fabric looks while its peer
// still holds the old. It must not take the peer's old region (or socket) for the new one: it
// would write where nobody reads, and the old one's closing would break the new group too.
TEST_P(rank_fabric_test, a_group_re_formed_under_the_same_name_connects_only_the_new_fabrics) {
  const auto g = spec(2, 256, 1);
  auto connect_both = [&](std::unique_ptr<rank_fabric>& a, std::unique_ptr<rank_fabric>& b) {
    std::array<bool, 2> ok{false, false};
    std::array<std::string, 2> why;
    std::thread other([&] {
      ok[1] = b->connect(
          scaled(10s), [] { return false; }, why[1]);
    });
    ok[0] = a->connect(
        scaled(10s), [] { return false; }, why[0]);
    other.join();
    EXPECT_TRUE(ok[0]) << why[0];
    EXPECT_TRUE(ok[1]) << why[1];
  };
  auto old_a = g.make(0), old_b = g.make(1);
  connect_both(old_a, old_b);

  old_a.reset(); // rank 0 noticed the break first
  auto new_a = g.make(0);
  std::string why;
  EXPECT_FALSE(new_a->connect(
      0ms, [] { return true; }, why))
      << "connected to rank 1's old fabric";
  old_b.reset(); // then rank 1
  auto new_b = g.make(1);
  connect_both(new_a, new_b);

  EXPECT_EQ(new_a->peer_failure(), "");
  EXPECT_EQ(new_b->peer_failure(), "");
  for (auto* f : {new_a.get(), new_b.get()}) {
    const int to = 1 - f->rank();
    const auto data = pattern(64, static_cast<uint64_t>(to) + 7);
    f->write(to, 0, data);
    f->add(to, 0, 1);
  }
  for (auto* f : {new_a.get(), new_b.get()}) {
    ASSERT_TRUE(f->wait(0, 1, scaled(10s))) << "rank " << f->rank() << " heard nothing";
    EXPECT_EQ(std::memcmp(f->local(), pattern(64, static_cast<uint64_t>(f->rank()) + 7).data(), 64),
              0);
  }
}

// Once a rank has said hello, another socket claiming that rank (an earlier fabric of it, or one
// that guessed the name) is not heard: not its hello, writes, adds, "leaving" nor garbage. The
// real rank is, down to its own "leaving".
TEST_P(rank_fabric_test, a_rank_is_heard_only_on_the_connection_it_said_hello_on) {
  if (!is_zmq()) GTEST_SKIP() << "shared memory has no connections";
  constexpr size_t bytes = 256, flags = 1;
  const auto g = spec(2, bytes, flags);
  std::unique_ptr<rank_fabric> a, b;
  std::thread rank1([&] {
    b = g.make(1);
    std::string why;
    EXPECT_TRUE(b->connect(
        scaled(10s), [] { return false; }, why))
        << why;
  });
  a = g.make(0);
  std::string why;
  EXPECT_TRUE(a->connect(
      scaled(10s), [] { return false; }, why))
      << why;
  rank1.join();
  ASSERT_TRUE(a && b);

  zmq::context_t ctx(1);
  zmq::socket_t other(ctx, zmq::socket_type::dealer);
  other.set(zmq::sockopt::linger, 0);
  other.set(zmq::sockopt::routing_id, "rank1@" + g.group + "#0123456789abcdef");
  other.connect(g.addresses[0]);
  wire::send_one(other, wire::tail_part(wire::hello, 2, bytes, flags));
  wire::send(other, [&] {
    std::vector<zmq::message_t> m;
    m.push_back(wire::write_part(0, pattern(64, 9)));
    m.push_back(wire::tail_part(wire::add, 0, 5));
    return m;
  }());
  wire::send_one(other, wire::tail_part(wire::leaving));
  wire::send_one(other, zmq::message_t(std::string("garbage")));
  ASSERT_TRUE(eventually([&] { return a->stale_messages() >= 4; }));
  EXPECT_EQ(a->stale_messages(), 4u);
  EXPECT_EQ(a->peer_failure(), "");
  EXPECT_EQ(a->load(0), 0u);
  EXPECT_TRUE(all_zero(a->local(), bytes));

  const auto data = pattern(64, 2);
  b->write(0, 0, data);
  b->add(0, 0, 1);
  ASSERT_TRUE(a->wait(0, 1, scaled(10s)));
  EXPECT_EQ(std::memcmp(a->local(), data.data(), data.size()), 0);
  b->leave();
  ASSERT_TRUE(eventually([&] { return !a->peer_failure().empty(); }));
  EXPECT_EQ(a->peer_failure(), "rank 1 left the group");
  EXPECT_EQ(a->stale_messages(), 4u);
}

TEST_P(rank_fabric_test, wait_times_out_and_self_adds_wake_it) {
  const auto g = spec(1, 64, 2);
  auto f = g.make(0);
  std::string why;
  ASSERT_TRUE(f->connect(
      1s, [] { return false; }, why))
      << why;
  auto start = clock_type::now();
  EXPECT_FALSE(f->wait(0, 1, 30ms));
  EXPECT_GE(clock_type::now() - start, 30ms);
  EXPECT_THROW(f->wait(2, 1, 1ms), std::out_of_range);
  EXPECT_THROW(f->load(2), std::out_of_range);

  // An add from another thread wakes the waiter, whether it still spins or already sleeps.
  std::thread adder([&] {
    while (f->load(1) == 0) std::this_thread::yield(); // the sleeper has started
    f->add(0, 0, 5);
  });
  f->add(0, 1, 1);
  start = clock_type::now();
  EXPECT_TRUE(f->wait(0, 5, scaled(10s)));
  EXPECT_LT(clock_type::now() - start, 5s);
  adder.join();
  EXPECT_EQ(f->load(0), 5u);
  f->write(0, 60, pattern(4, 3));
  EXPECT_EQ(std::memcmp(f->local() + 60, pattern(4, 3).data(), 4), 0);
  EXPECT_EQ(f->bytes_sent(), 0u) << "writes to itself are not traffic";
}

// rank 0 writes 128 KiB and bumps rank 1, which answers with 128 KiB of its own.
TEST_P(rank_fabric_test, round_trip_of_128_kib_each_way) {
  constexpr size_t bytes = 128 * 1024;
  const int rounds = is_zmq() ? 300 : 2000, warmup = 20;
  std::vector<double> micros;
  run_group(spec(2, bytes, 1), [&](rank_fabric& f) {
    const auto data = pattern(bytes, f.rank());
    const int peer = 1 - f.rank();
    for (int i = 1; i <= rounds; ++i) {
      const auto start = clock_type::now();
      if (f.rank() == 0) {
        f.write(peer, 0, data);
        f.add(peer, 0, 1);
      }
      ASSERT_TRUE(f.wait(0, i, scaled(10s)));
      if (f.rank() == 1) {
        f.write(peer, 0, data);
        f.add(peer, 0, 1);
      } else if (i > warmup) {
        micros.push_back(
            std::chrono::duration<double, std::micro>(clock_type::now() - start).count());
      }
    }
  });
  ASSERT_FALSE(micros.empty());
  std::sort(micros.begin(), micros.end());
  const double median = micros[micros.size() / 2], p99 = micros[micros.size() * 99 / 100];
  std::printf(
      "[ rank fabric %s ] 128 KiB + add each way: median %.1f us, p99 %.1f us (%zu rounds)\n",
      kind_name(GetParam()).c_str(), median, p99, micros.size());
  RecordProperty("round_trip_median_us", std::to_string(median));
}

// A raw socket plays rank 2 of a group and sends garbage to rank 0: every bad message is dropped
// whole, the first is reported, and a good message after them (same pipe, so applied after them)
// shows the receiver is still serving and that nothing else reached the region.
TEST_P(rank_fabric_test, malformed_frames_from_a_rank_are_dropped_and_reported) {
  if (!is_zmq()) GTEST_SKIP() << "shared memory has no frames";
  constexpr size_t bytes = 4096, flags = 3;
  const auto g = spec(3, bytes, flags);
  auto f = g.make(0);
  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.set(zmq::sockopt::routing_id, "rank2@" + g.group);
  raw.connect(g.addresses[0]);
  wire::send_one(raw, wire::tail_part(wire::hello, 3, bytes, flags)); // introduces "rank 2"

  const auto eight = pattern(8, 5);
  std::vector<std::vector<zmq::message_t>> bad;
  auto message = [&](auto&&... parts) {
    std::vector<zmq::message_t> m;
    (m.push_back(std::move(parts)), ...);
    bad.push_back(std::move(m));
  };
  message(zmq::message_t(std::string("garbage")));
  message(wire::tail_part(wire::add, flags, 1));                                 // no such flag
  message(wire::write_part(bytes - 4, eight), wire::tail_part(wire::add, 0, 1)); // past the end
  message(wire::write_part(std::numeric_limits<uint64_t>::max() - 2, eight),
          wire::tail_part(wire::writes));                                      // wraps around
  message(zmq::message_t(5), wire::tail_part(wire::add, 0, 1));                // no offset
  message(wire::write_part(0, eight), wire::tail_part(wire::hello, 3, bytes)); // data on hello
  message(wire::write_part(0, eight), wire::tail_part(9, 0, 1));               // unknown kind
  message(wire::write_part(0, eight), zmq::message_t(33));                     // long tail
  {
    auto t = wire::tail_part(wire::add, 0, 1);
    static_cast<uint8_t*>(t.data())[0] ^= 0xff;
    message(wire::write_part(0, eight), std::move(t)); // bad magic
  }
  for (auto& m : bad) wire::send(raw, std::move(m));
  const auto good = pattern(16, 6);
  wire::send(raw, [&] {
    std::vector<zmq::message_t> m;
    m.push_back(wire::write_part(64, good));
    m.push_back(wire::tail_part(wire::add, 1, 7));
    return m;
  }());

  ASSERT_TRUE(f->wait(1, 7, scaled(10s)));
  const std::string why = f->peer_failure();
  EXPECT_EQ(why.rfind("rank 2 sent a malformed frame: ", 0), 0u) << why;
  EXPECT_TRUE(all_zero(f->local(), 64));
  EXPECT_EQ(std::memcmp(f->local() + 64, good.data(), good.size()), 0);
  EXPECT_TRUE(all_zero(f->local() + 80, bytes - 80));
  EXPECT_EQ(f->load(0), 0u);
  EXPECT_EQ(f->load(1), 7u);
  EXPECT_EQ(f->load(2), 0u);
}

// A socket that is no rank of the group (or claims to be the receiver itself) writes nothing.
// One fresh fabric per stranger: its report then proves that stranger's message was handled.
TEST_P(rank_fabric_test, frames_from_outside_the_group_are_dropped_and_reported) {
  if (!is_zmq()) GTEST_SKIP() << "shared memory has no frames";
  constexpr size_t bytes = 1024;
  // Rank 1 of another formation of the group (the name after '@' differs) is a stranger too.
  for (std::string id : {"", "rank0@", "rank7@", "rank01@", "rank@", "rank1", "rank1@elsewhere"}) {
    SCOPED_TRACE("routing id '" + id + "'");
    const auto g = spec(2, bytes, 1);
    if (id.ends_with("@")) id += g.group;
    auto f = g.make(0);
    zmq::context_t ctx(1);
    zmq::socket_t raw(ctx, zmq::socket_type::dealer);
    raw.set(zmq::sockopt::linger, 0);
    if (!id.empty()) raw.set(zmq::sockopt::routing_id, id);
    raw.connect(g.addresses[0]);
    std::vector<zmq::message_t> m;
    m.push_back(wire::write_part(0, pattern(8, 1)));
    m.push_back(wire::tail_part(wire::add, 0, 1));
    wire::send(raw, std::move(m));
    ASSERT_TRUE(eventually([&] { return !f->peer_failure().empty(); }));
    const std::string why = f->peer_failure();
    EXPECT_EQ(why.rfind("a sender outside the group", 0), 0u) << why;
    EXPECT_NE(why.find("sent a malformed frame: not a rank of this group"), std::string::npos)
        << why;
    EXPECT_EQ(f->load(0), 0u);
    EXPECT_TRUE(all_zero(f->local(), bytes));
  }
}

// With the cluster's keys the fabric runs CurveZMQ: the ranks' instances connect and move data,
// while a socket without CURVE, one with a key of no instance and rank 1's instance claiming to be
// rank 2 are each refused or dropped, counted once, and write nothing; the group stays healthy.
TEST_P(rank_fabric_test, with_keys_only_each_ranks_own_instance_reaches_the_region) {
  if (!is_zmq()) GTEST_SKIP() << "shared memory has no connections";
  constexpr size_t bytes = 1024;
  auto g = spec(3, bytes, 2);
  g.instances = {"fabric-0", "fabric-1", "fabric-2"};
  auto keys = std::make_shared<cluster_keys>(dir_ / "keys");
  keys->ensure(g.instances);
  g.keys = keys;
  const auto data = pattern(64, 3);
  run_group(g, [&](rank_fabric& f) {
    if (f.rank() != 0) {
      f.write(0, 64 * f.rank(), data);
      f.add(0, 0, 1);
      if (f.rank() == 2) return;
      // Rank 1 goes on once rank 0 has seen every intruder: the group still works.
      ASSERT_TRUE(f.wait(0, 1, scaled(10s)));
      f.write(0, 192, data);
      f.add(0, 1, 1);
      return;
    }
    ASSERT_TRUE(f.wait(0, 2, scaled(10s)));
    zmq::context_t ctx(1);
    const auto server_key = *keys->public_key("fabric-0");
    auto intrude = [&](const curve_keypair* pair) {
      zmq::socket_t s(ctx, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::routing_id, "rank2@" + g.group);
      s.set(zmq::sockopt::reconnect_ivl, -1); // one handshake attempt each
      if (pair) {
        s.set(zmq::sockopt::curve_serverkey, server_key);
        s.set(zmq::sockopt::curve_publickey, pair->public_key);
        s.set(zmq::sockopt::curve_secretkey, pair->secret_key);
      }
      s.connect(g.addresses[0]);
      std::vector<zmq::message_t> m;
      m.push_back(wire::write_part(0, pattern(64, 4)));
      m.push_back(wire::tail_part(wire::add, 1, 100));
      zmq::send_multipart(s, m, zmq::send_flags::dontwait);
      return s;
    };
    const auto stranger_pair = make_curve_keypair(), rank1_pair = keys->own("fabric-1");
    auto plain = intrude(nullptr);
    EXPECT_TRUE(eventually([&] { return f.trust_rejections() >= 1; }));
    auto stranger = intrude(&stranger_pair);
    EXPECT_TRUE(eventually([&] { return f.trust_rejections() >= 2; }));
    auto impostor = intrude(&rank1_pair);
    EXPECT_TRUE(eventually([&] { return f.trust_rejections() >= 3; }));
    f.add(1, 0, 1);
    ASSERT_TRUE(f.wait(1, 1, scaled(10s)));
    EXPECT_EQ(f.load(1), 1u) << "an intruder's add arrived";
    EXPECT_EQ(f.trust_rejections(), 3u);
    EXPECT_EQ(f.peer_failure(), "");
    EXPECT_TRUE(all_zero(f.local(), 64)) << "an intruder's write arrived";
    for (size_t at : {64, 128, 192})
      EXPECT_EQ(std::memcmp(f.local() + at, data.data(), data.size()), 0) << "at " << at;
  });
}

INSTANTIATE_TEST_SUITE_P(fabrics, rank_fabric_test,
                         ::testing::Values(fabric_kind::shm, fabric_kind::zmq_ipc,
                                           fabric_kind::zmq_tcp),
                         [](const auto& info) { return kind_name(info.param); });

} // namespace
