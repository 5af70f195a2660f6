// The shm plane (UB stand-in): segments, the SPSC ring, registered regions and the plane itself,
// in one process and between real processes (fork). Children report through exit codes and
// region flags; every wait has a timeout, nothing sleeps to synchronise.

#include "../support/eventually.hpp"
#include "log/log.hpp"
#include "transport/cluster_keys.hpp"
#include "transport/control_messages.hpp"
#include "transport/shm_plane.hpp"
#include "transport/shm_region.hpp"
#include "transport/shm_ring.hpp"
#include "transport/shm_segment.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <mutex>
#include <pwd.h>
#include <random>
#include <sched.h>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using supernode::testing::eventually;
using namespace supernode::transport;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

std::string unique_cluster(const char* tag) {
  static int n = 0;
  return "t" + std::to_string(getpid()) + "_" + tag + std::to_string(n++);
}

// Runs `body` in a forked child and returns its pid; the child's exit code is body's result.
// alarm() bounds a child that hangs, so the parent's waitpid never blocks forever.
pid_t fork_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    int rc = 90;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child failed: %s\n", e.what());
    }
    _exit(rc);
  }
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<std::byte> encoded(const envelope& e) {
  auto b = e.encode();
  return {b.bytes().begin(), b.bytes().end()};
}

std::vector<char> pattern(size_t n, uint64_t seed) {
  std::vector<char> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v[i] = static_cast<char>(x);
  }
  return v;
}

// One of every control message, with non-default fields.
std::vector<envelope> every_control_message(size_t bulk_bytes) {
  return {make_envelope(ping{1, 11, {'p', 'i', 'n', 'g'}}),
          make_envelope(pong{2, 22, {'p', 'o', 'n', 'g'}}),
          make_envelope(bulk_chunk{7, 0, bulk_bytes, pattern(bulk_bytes, 7)}),
          make_envelope(bulk_ack{7, bulk_bytes, 0xABCDEF}),
          make_envelope(heartbeat{"child", 3, 99}),
          make_envelope(member_join{"decode-1", "decode", 42, {{"ub", "shm:decode-1"}}}),
          make_envelope(member_leave{"decode-1", "drain"})};
}

// Collects what a plane's handler receives; waits with a timeout.
struct inbox_log {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::pair<peer_id, envelope>> got;
  message_handler handler() {
    return [this](const peer_id& from, envelope e) {
      std::lock_guard lock(m);
      got.emplace_back(from, std::move(e));
      cv.notify_all();
    };
  }
  bool wait_for(size_t n, std::chrono::milliseconds timeout = 20s) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, timeout, [&] { return got.size() >= n; });
  }
};

send_status send_retrying(shm_plane& p, const peer_id& to, const envelope& e,
                          std::chrono::milliseconds timeout = 20s) {
  const auto deadline = clock_type::now() + timeout;
  send_status s;
  while ((s = p.send(to, e)) == send_status::queue_full && clock_type::now() < deadline)
    std::this_thread::yield(); // back-pressure: the receiver drains, we retry
  return s;
}

// A key folder of its own with a pair for each of `instances`; removed with the object.
struct key_folder {
  std::filesystem::path dir;
  std::shared_ptr<const cluster_keys> keys;
  explicit key_folder(const std::vector<std::string>& instances) {
    static int n = 0;
    dir = std::filesystem::temp_directory_path() /
          ("sn-shm-keys-" + std::to_string(getpid()) + "-" + std::to_string(n++));
    keys = std::make_shared<const cluster_keys>(dir);
    keys->ensure(instances);
  }
  ~key_folder() { std::filesystem::remove_all(dir); }
  shm_plane_options options() const {
    shm_plane_options o;
    o.keys = keys;
    return o;
  }
};

class shm_fixture : public ::testing::Test {
protected:
  void SetUp() override { register_control_messages(); }
  void TearDown() override {
    cleanup_stale_segments(cluster);
    EXPECT_TRUE(list_segments(cluster).empty()) << "left over: " << list_segments(cluster).front();
  }
  std::string cluster = unique_cluster("c");
};

} // namespace

// ---- segments ---------------------------------------------------------------------------

TEST_F(shm_fixture, segment_validates_what_it_opens) {
  // Missing: nothing; wrong kind, garbage and truncated: errors that name the segment.
  EXPECT_FALSE(shm_segment::try_open(cluster, "nope", segment_kind::ring));
  {
    const mode_t old_umask = ::umask(0); // 0600 whatever the umask lets through
    auto s = shm_segment::create(cluster, "seg", segment_kind::region, 100);
    ::umask(old_umask);
    EXPECT_EQ(s.creator_pid(), getpid());
    struct stat st {};
    ASSERT_EQ(::stat(("/dev/shm" + s.name()).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "segments are this user's alone";
    auto o = shm_segment::open(cluster, "seg", segment_kind::region);
    EXPECT_EQ(o.data_bytes(), 100u);
    std::memcpy(s.data(), "hello", 5);
    EXPECT_EQ(std::memcmp(o.data(), "hello", 5), 0);
    try {
      shm_segment::open(cluster, "seg", segment_kind::ring);
      ADD_FAILURE() << "opened a region as a ring";
    } catch (const shm_error& e) {
      EXPECT_NE(std::string(e.what()).find("seg"), std::string::npos) << e.what();
    }
    // A second creator while the first lives is refused.
    EXPECT_THROW(shm_segment::create(cluster, "seg", segment_kind::region, 100), shm_error);
  }
  EXPECT_FALSE(shm_segment::try_open(cluster, "seg", segment_kind::region)) << "creator unlinks";

  const std::string garbage = shm_segment::full_name(cluster, "garbage");
  int fd = shm_open(garbage.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  std::vector<char> junk(8192, 'j');
  ASSERT_EQ(write(fd, junk.data(), junk.size()), 8192);
  close(fd);
  try {
    shm_segment::open(cluster, "garbage", segment_kind::ring);
    ADD_FAILURE() << "garbage opened";
  } catch (const shm_error& e) {
    EXPECT_NE(std::string(e.what()).find(garbage), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos) << e.what();
  }
  fd = shm_open(garbage.c_str(), O_RDWR | O_TRUNC, 0600);
  ASSERT_EQ(ftruncate(fd, 100), 0);
  close(fd);
  try {
    shm_segment::open(cluster, "garbage", segment_kind::ring);
    ADD_FAILURE() << "truncated segment opened";
  } catch (const shm_error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  shm_unlink(garbage.c_str());
  EXPECT_THROW(shm_segment::create("bad.cluster", "x", segment_kind::ring, 1),
               std::invalid_argument);
}

TEST_F(shm_fixture, stale_segments_of_a_dead_creator_are_cleaned_up) {
  // A child creates segments and dies without destructors (a crash, as far as shm can tell).
  const pid_t child = fork_child([&] {
    new shm_segment(shm_segment::create(cluster, "leak1", segment_kind::region, 4096));
    new shm_segment(shm_segment::create(cluster, "leak2", segment_kind::ring, 4096));
    return 0;
  });
  ASSERT_EQ(wait_child(child), 0);
  auto mine = shm_segment::create(cluster, "mine", segment_kind::region, 64);
  EXPECT_EQ(list_segments(cluster).size(), 3u);
  EXPECT_EQ(cleanup_stale_segments(cluster), 2u);
  ASSERT_EQ(list_segments(cluster).size(), 1u) << "the live creator's segment stays";
  // A stale leftover of the same name is replaced by a new creator.
  const pid_t again = fork_child([&] {
    new shm_segment(shm_segment::create(cluster, "leak1", segment_kind::region, 4096));
    return 0;
  });
  ASSERT_EQ(wait_child(again), 0);
  auto replaced = shm_segment::create(cluster, "leak1", segment_kind::region, 4096);
  EXPECT_EQ(replaced.creator_pid(), getpid());
}

// A creator in another PID namespace (a container): its pid names another process here, or
// none, so only the lock it holds on the segment tells whether it lives. The child unshares a
// PID namespace and forks the creator into it (pid 1 there); killed, its segment is noticed as
// stale and cleaned.
TEST_F(shm_fixture, a_creator_in_another_pid_namespace_is_alive_until_killed_then_cleaned) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t outer = fork_child([&] {
    if (unshare(CLONE_NEWPID) != 0) return 77; // not permitted here
    const pid_t creator = fork_child([&] {
      auto segment = shm_segment::create(cluster, "contained", segment_kind::region, 4096);
      const char pid_here = static_cast<char>(getpid());
      if (write(ready[1], &pid_here, 1) != 1) return 1;
      pause(); // until killed
      return 0;
    });
    return wait_child(creator) == 128 + SIGKILL ? 0 : 2;
  });
  close(ready[1]);
  char pid_inside = 0;
  const bool started = read(ready[0], &pid_inside, 1) == 1;
  close(ready[0]);
  if (!started) {
    const int rc = wait_child(outer);
    if (rc == 77) GTEST_SKIP() << "unshare(CLONE_NEWPID) is not permitted here";
    FAIL() << "the child exited with " << rc << " before creating its segment";
  }
  EXPECT_EQ(pid_inside, 1) << "the creator is its namespace's first process";
  auto seen = shm_segment::open(cluster, "contained", segment_kind::region);
  EXPECT_EQ(seen.creator_pid(), 1) << "a pid from the other namespace";
  EXPECT_TRUE(seen.creator_alive());
  EXPECT_EQ(cleanup_stale_segments(cluster), 0u) << "a living creator's segment stays";
  // The creator is the outer child's only child: kill the whole namespace by killing its init.
  std::string children;
  std::ifstream(std::filesystem::path("/proc") / std::to_string(outer) / "task" /
                std::to_string(outer) / "children") >>
      children;
  ASSERT_FALSE(children.empty()) << "no creator under the child " << outer;
  ASSERT_EQ(kill(std::stoi(children), SIGKILL), 0);
  EXPECT_EQ(wait_child(outer), 0) << "the creator died of SIGKILL";
  EXPECT_FALSE(seen.creator_alive());
  EXPECT_EQ(cleanup_stale_segments(cluster), 1u);
  EXPECT_TRUE(list_segments(cluster).empty());
}

TEST_F(shm_fixture, cleanup_of_one_dead_creator_leaves_other_dead_creators_segments) {
  // Two children crash leaving segments; a supervisor cleans after the one it saw die only.
  auto leak = [&](const char* name) {
    return fork_child([&, name] {
      new shm_segment(shm_segment::create(cluster, name, segment_kind::region, 4096));
      return 0;
    });
  };
  const pid_t first = leak("first"), second = leak("second");
  ASSERT_EQ(wait_child(first), 0);
  ASSERT_EQ(wait_child(second), 0);
  auto mine = shm_segment::create(cluster, "mine", segment_kind::region, 64);
  EXPECT_EQ(cleanup_segments_of(cluster, first),
            std::vector<std::string>{shm_segment::full_name(cluster, "first").substr(1)});
  EXPECT_EQ(list_segments(cluster).size(), 2u) << "the other dead one's and the live one's stay";
  EXPECT_TRUE(cleanup_segments_of(cluster, ::getpid()).empty()) << "a live creator's stay";
  EXPECT_EQ(cleanup_segments_of(cluster, second).size(), 1u);
}

TEST_F(shm_fixture, stale_cleanup_leaves_another_users_segment_alone) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a segment to another user (nobody)";
  const passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  // Two leftovers of a dead creator: one stays ours, one is handed to nobody.
  const pid_t child = fork_child([&] {
    new shm_segment(shm_segment::create(cluster, "ours", segment_kind::region, 4096));
    new shm_segment(shm_segment::create(cluster, "theirs", segment_kind::region, 4096));
    return 0;
  });
  ASSERT_EQ(wait_child(child), 0);
  const std::string theirs = "/dev/shm" + shm_segment::full_name(cluster, "theirs");
  ASSERT_EQ(::chown(theirs.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  EXPECT_EQ(cleanup_stale_segments(cluster), 1u);
  EXPECT_EQ(list_segments(cluster),
            std::vector<std::string>{shm_segment::full_name(cluster, "theirs").substr(1)});
  // Nor is it opened as a peer's, or replaced by a creator of the same name.
  try {
    shm_segment::try_open(cluster, "theirs", segment_kind::region);
    ADD_FAILURE() << "another user's segment opened";
  } catch (const shm_error& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to uid " + std::to_string(nobody->pw_uid)),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(shm_segment::create(cluster, "theirs", segment_kind::region, 4096), shm_error);
  EXPECT_EQ(list_segments(cluster).size(), 1u);
  ::unlink(theirs.c_str());
}

// ---- the ring ---------------------------------------------------------------------------

TEST_F(shm_fixture, ring_wraps_around_with_random_sizes_byte_for_byte) {
  auto producer = shm_ring::create(cluster, "ring", 64 * 1024, ring_role::producer);
  auto consumer = shm_ring::open(cluster, "ring", ring_role::consumer);
  EXPECT_EQ(producer.capacity(), 64u * 1024);
  std::mt19937_64 rng(42);
  std::deque<std::vector<char>> in_flight;
  uint64_t pushed = 0, popped = 0, fulls = 0, bytes = 0;
  // Random sizes up to the largest record push the head across the end many times.
  std::uniform_int_distribution<size_t> size(0, producer.max_record_bytes());
  std::uniform_int_distribution<int> coin(0, 2);
  while (popped < 3000) {
    if (coin(rng) != 0 && pushed < 3000) {
      auto rec = pattern(coin(rng) == 0 ? size(rng) : size(rng) % 512, pushed);
      const auto st =
          producer.try_push(static_cast<uint32_t>(pushed), std::as_bytes(std::span(rec)));
      if (st == ring_status::ok) {
        in_flight.push_back(std::move(rec));
        ++pushed;
      } else {
        ASSERT_EQ(st, ring_status::queue_full);
        ++fulls;
      }
    } else if (auto r = consumer.peek()) {
      ASSERT_FALSE(in_flight.empty());
      ASSERT_EQ(r->tag, popped);
      ASSERT_EQ(r->bytes.size(), in_flight.front().size());
      ASSERT_TRUE(std::equal(r->bytes.begin(), r->bytes.end(),
                             std::as_bytes(std::span(in_flight.front())).begin()))
          << "record " << popped;
      bytes += r->bytes.size();
      consumer.pop();
      in_flight.pop_front();
      ++popped;
    }
  }
  EXPECT_GT(bytes, 10u * producer.capacity()) << "wrapped many times";
  EXPECT_GT(fulls, 0u);
  EXPECT_FALSE(consumer.peek());

  // Too large is refused outright; a full ring answers queue_full without blocking.
  std::vector<std::byte> big(producer.max_record_bytes() + 1);
  EXPECT_EQ(producer.try_push(0, big), ring_status::too_large);
  std::vector<std::byte> quarter(producer.capacity() / 4);
  int accepted = 0;
  while (producer.try_push(1, quarter) == ring_status::ok) ++accepted;
  EXPECT_GE(accepted, 2);
  EXPECT_EQ(producer.try_push(1, quarter), ring_status::queue_full);
  EXPECT_FALSE(producer.wait_for_space(quarter.size(), 1ms));
  consumer.peek();
  consumer.pop();
  EXPECT_TRUE(producer.wait_for_space(quarter.size(), 1ms));
}

TEST_F(shm_fixture, ring_streams_between_processes_and_sleeps_when_idle) {
  auto consumer = shm_ring::create(cluster, "x", 1 << 16, ring_role::consumer);
  constexpr int records = 20000;
  const pid_t child = fork_child([&] {
    auto p = shm_ring::open(cluster, "x", ring_role::producer);
    for (int i = 0; i < records; ++i) {
      auto rec = pattern(static_cast<size_t>(i * 7919) % 3000, i);
      while (p.try_push(i, std::as_bytes(std::span(rec))) == ring_status::queue_full)
        if (!p.wait_for_space(rec.size(), 5s)) return 2;
    }
    return 0;
  });
  for (int i = 0; i < records; ++i) {
    ASSERT_TRUE(consumer.wait_for_data(10s));
    auto r = consumer.peek();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->tag, static_cast<uint32_t>(i));
    auto want = pattern(static_cast<size_t>(i * 7919) % 3000, i);
    ASSERT_EQ(r->bytes.size(), want.size());
    ASSERT_TRUE(
        std::equal(r->bytes.begin(), r->bytes.end(), std::as_bytes(std::span(want)).begin()));
    consumer.pop();
  }
  EXPECT_EQ(wait_child(child), 0);
  // An idle wait sleeps on the futex: little CPU time for a long wait.
  const auto cpu0 = std::clock();
  EXPECT_FALSE(consumer.wait_for_data(200ms));
  EXPECT_LT(double(std::clock() - cpu0) / CLOCKS_PER_SEC, 0.1);
  EXPECT_FALSE(consumer.peer_alive());
}

// ---- registered regions -----------------------------------------------------------------

TEST_F(shm_fixture, region_checks_bounds_with_clear_errors) {
  auto r = shm_region::create(cluster, "rb", 4096, 4);
  std::vector<std::byte> b(16);
  EXPECT_NO_THROW(r.write(4096 - 16, b));
  try {
    r.write(4096 - 15, b);
    ADD_FAILURE();
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("rb"), std::string::npos) << e.what();
  }
  EXPECT_THROW(r.write(SIZE_MAX, b), std::out_of_range);
  EXPECT_THROW(r.publish(4, 1), std::out_of_range);
  EXPECT_THROW(r.wait(9, 1, 1ms), std::out_of_range);
  EXPECT_FALSE(r.wait(0, 1, 1ms));
  EXPECT_EQ(r.add(0, 2), 2u);
  EXPECT_TRUE(r.wait(0, 2, 1ms));
  EXPECT_THROW(shm_region::open(cluster, "missing"), shm_error);
}

TEST_F(shm_fixture, one_sided_writes_are_visible_after_the_flag_and_not_before) {
  constexpr size_t bytes = 8u << 20;
  constexpr uint64_t rounds = 150;
  constexpr size_t words = bytes / 8;
  // Flag 0: the round the writer has published. Flag 1: the round the owner has checked.
  auto region = shm_region::create(cluster, "dispatch", bytes, 2);
  const pid_t writer = fork_child([&] {
    auto r = shm_region::open(cluster, "dispatch");
    std::vector<uint64_t> src(words);
    for (uint64_t round = 1; round <= rounds; ++round) {
      if (!r.wait(1, round - 1, 10s)) return 3;
      for (size_t i = 0; i < words; ++i) src[i] = round * 0x100000001ull + i;
      r.write(0, std::as_bytes(std::span(src)));
      r.publish(0, round);
    }
    return 0;
  });
  const auto* data = reinterpret_cast<const uint64_t*>(region.data());
  uint64_t checked = 0;
  for (uint64_t round = 1; round <= rounds; ++round) {
    ASSERT_TRUE(region.wait(0, round, 10s)) << "round " << round;
    // The writer waits for our ack, so the flag is exactly this round and the whole buffer
    // holds this round's pattern: no word of it is stale, none is from the next round.
    ASSERT_EQ(region.load(0), round);
    size_t bad = 0;
    for (size_t i = 0; i < words; ++i) bad += data[i] != round * 0x100000001ull + i;
    ASSERT_EQ(bad, 0u) << "round " << round;
    checked += words;
    region.publish(1, round);
  }
  EXPECT_EQ(wait_child(writer), 0);
  EXPECT_EQ(checked, rounds * words);
}

// ---- the plane --------------------------------------------------------------------------

TEST_F(shm_fixture, plane_round_trips_every_control_message_in_one_process) {
  inbox_log log; // outlives the plane, whose receive thread delivers into it
  shm_plane a(cluster, "a"), b(cluster, "b");
  b.set_handler(log.handler());
  a.start();
  b.start();
  auto messages = every_control_message(64u << 20);
  for (auto& m : messages) ASSERT_EQ(send_retrying(a, "b", m), send_status::ok);
  ASSERT_TRUE(log.wait_for(messages.size()));
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_EQ(log.got[i].first, "a");
    EXPECT_EQ(encoded(log.got[i].second), encoded(messages[i])) << "message " << i;
  }
  const auto* bulk = log.got[2].second.get<bulk_chunk>();
  ASSERT_TRUE(bulk);
  EXPECT_EQ(bulk->data, pattern(64u << 20, 7));
  EXPECT_EQ(b.counters().bad_frames.total(), 0u);
  EXPECT_EQ(b.counters().messages_received.load(), messages.size());
  EXPECT_EQ(a.send("nobody", messages[0]), send_status::unknown_peer);
  // Over the type's limit: too_large, nothing sent.
  EXPECT_EQ(a.send("b", make_envelope(ping{1, 1, std::vector<char>(ping::max_bytes + 1)})),
            send_status::too_large);
}

TEST_F(shm_fixture, plane_full_ring_pushes_back) {
  shm_plane_options small;
  small.ring_bytes = 64 * 1024;
  small.outbound_limit_bytes = 64 * 1024;
  shm_plane a(cluster, "a", small), b(cluster, "b", small); // b never started: nothing drains
  auto m = make_envelope(ping{1, 2, std::vector<char>(1000)});
  int sent = 0;
  send_status s;
  while ((s = a.send("b", m)) == send_status::ok) ++sent;
  EXPECT_EQ(s, send_status::queue_full);
  EXPECT_GT(sent, 20);
  EXPECT_GE(a.counters().queue_full.load(), 1u);
  // Once b drains, everything sent arrives in order.
  inbox_log log;
  b.set_handler(log.handler());
  b.start();
  ASSERT_TRUE(log.wait_for(sent));
  a.stop();
  EXPECT_EQ(a.send("b", m), send_status::closed);
}

// A frame too big for one record is reassembled into a buffer of its own that the decoded message
// references (no second copy); the message outlives both planes and the pool the buffer came from
// (ASan builds check the reads). A frame small enough for one record is copied out of the ring.
TEST_F(shm_fixture, reassembled_bulk_data_is_referenced_and_outlives_the_plane) {
  shm_plane_options small;
  small.ring_bytes = 1u << 20; // records of at most 512 KiB: a 3 MiB chunk is fragmented
  small.fragment_bytes = 256u << 10;
  const auto big = pattern(3u << 20, 11), little = pattern(100u << 10, 12);
  std::vector<envelope> kept;
  {
    inbox_log log;
    shm_plane a(cluster, "a", small), b(cluster, "b", small);
    b.set_handler(log.handler());
    b.start();
    ASSERT_EQ(send_retrying(a, "b", make_envelope(bulk_chunk{1, 0, big.size(), big})),
              send_status::ok);
    ASSERT_EQ(send_retrying(a, "b", make_envelope(bulk_chunk{2, 0, little.size(), little})),
              send_status::ok);
    ASSERT_TRUE(log.wait_for(2));
    std::lock_guard lock(log.m);
    for (auto& [from, e] : log.got) kept.push_back(e);
    EXPECT_EQ(b.counters().bad_frames.total(), 0u);
  }
  ASSERT_EQ(kept.size(), 2u);
  const auto* first = kept[0].get<bulk_chunk>();
  const auto* second = kept[1].get<bulk_chunk>();
  ASSERT_TRUE(first && second);
  // The reassembly buffer holds the whole frame: header and MessagePack before the body.
  const auto* buffer = static_cast<const char*>(first->data.owner().get());
  EXPECT_GT(first->data.data(), buffer) << "the body was copied out of the reassembly buffer";
  EXPECT_LT(first->data.data(), buffer + 256);
  EXPECT_EQ(first->data, big);
  EXPECT_EQ(second->data, little);
}

TEST_F(shm_fixture, bad_frames_are_counted_by_reason_and_the_next_good_frame_is_served) {
  inbox_log log; // outlives the plane, whose receive thread delivers into it
  shm_plane evil(cluster, "evil"), b(cluster, "b");
  b.set_handler(log.handler());
  b.start();
  const auto good = encoded(make_envelope(ping{77, 0, {'o', 'k'}}));
  auto truncated = good;
  truncated.resize(good.size() - 1);
  std::vector<std::byte> garbage(100);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = std::byte(i * 31 + 5);
  auto wrong_version = good;
  wrong_version[4] = std::byte{9};
  auto unknown = good;
  unknown[6] = std::byte{0x70};
  unknown[7] = std::byte{0x7F};
  const auto oversized = encoded(make_envelope(ping{1, 0, std::vector<char>(ping::max_bytes)}));
  const std::vector<std::byte> empty;
  const std::vector<const std::vector<std::byte>*> frames = {
      &truncated, &garbage, &wrong_version, &unknown, &oversized, &empty, &good};
  for (const auto* f : frames) ASSERT_EQ(evil.send_frame("b", *f), send_status::ok);
  // Frames past the plane's limit never leave the sender.
  EXPECT_EQ(evil.send_frame("b", std::vector<std::byte>((64u << 20) + (128u << 10))),
            send_status::too_large);
  ASSERT_TRUE(log.wait_for(1));
  EXPECT_EQ(log.got[0].second.get<ping>()->seq, 77u);
  const auto& bad = b.counters().bad_frames;
  EXPECT_EQ(bad.get(frame_error::truncated), 2u); // one byte short, and empty
  EXPECT_EQ(bad.get(frame_error::bad_magic), 1u);
  EXPECT_EQ(bad.get(frame_error::wrong_version), 1u);
  EXPECT_EQ(bad.get(frame_error::unknown_type), 1u);
  EXPECT_EQ(bad.get(frame_error::oversized), 1u);
  EXPECT_EQ(bad.total(), 6u);
  // A garbage frame over the fragment path too: the receiver keeps serving.
  std::vector<std::byte> big_garbage(6u << 20, std::byte{0x5A});
  ASSERT_EQ(evil.send_frame("b", big_garbage), send_status::ok);
  ASSERT_EQ(evil.send_frame("b", good), send_status::ok);
  ASSERT_TRUE(log.wait_for(2));
  EXPECT_EQ(bad.get(frame_error::bad_magic), 2u);
}

TEST_F(shm_fixture, a_flood_of_bad_frames_is_logged_once_per_interval) {
  std::ostringstream logged;
  supernode::log::redirect_for_testing(&logged);
  supernode::log::set_default_rate_interval(
      std::chrono::hours(1)); // no interval ends during the test
  shm_plane evil(cluster, "evil"), b(cluster, "b");
  b.set_logger(supernode::log::logger{"b", 5});
  inbox_log inbox;
  b.set_handler(inbox.handler());
  b.start();
  const std::vector<std::byte> garbage(64, std::byte{0x5A});
  for (int i = 0; i < 50; ++i) ASSERT_EQ(evil.send_frame("b", garbage), send_status::ok);
  ASSERT_EQ(evil.send_frame("b", encoded(make_envelope(ping{9, 0, {}}))), send_status::ok);
  ASSERT_TRUE(inbox.wait_for(1)); // the bad frames came first, on the same receiving thread
  EXPECT_EQ(b.counters().bad_frames.total(), 50u);
  supernode::log::redirect_for_testing(nullptr);
  supernode::log::set_default_rate_interval(std::chrono::seconds(1));
  const std::string text = logged.str();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_NE(
      text.find("instance=b incarnation=5 request=- shm " + cluster + ": bad frame #1 from evil"),
      std::string::npos)
      << text;
}

TEST_F(shm_fixture, plane_round_trips_between_two_processes) {
  // The child echoes every message back to its sender; it stops when flag 1 is raised.
  auto sync = shm_region::create(cluster, "sync", 0, 2);
  const pid_t child = fork_child([&] {
    register_control_messages();
    shm_plane plane(cluster, "child");
    plane.set_handler([&](const peer_id& from, envelope e) {
      if (send_retrying(plane, from, e) != send_status::ok) _exit(4);
    });
    plane.start();
    auto r = shm_region::open(cluster, "sync");
    r.publish(0, 1);
    if (!r.wait(1, 1, 50s)) return 5;
    plane.stop();
    return 0;
  });
  ASSERT_TRUE(sync.wait(0, 1, 20s)) << "child never came up";
  inbox_log log; // outlives the plane, whose receive thread delivers into it
  shm_plane parent(cluster, "parent");
  parent.set_handler(log.handler());
  std::vector<peer_id> down;
  std::mutex down_mutex;
  parent.set_disconnect_handler([&](const peer_id& p) {
    std::lock_guard lock(down_mutex);
    down.push_back(p);
  });
  parent.start();
  auto messages = every_control_message(64u << 20);
  const auto t0 = clock_type::now();
  for (auto& m : messages) ASSERT_EQ(send_retrying(parent, "child", m), send_status::ok);
  ASSERT_TRUE(log.wait_for(messages.size(), 30s));
  std::printf("[ info ] 7 messages incl. 64 MiB there and back: %.1f ms\n",
              std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_EQ(log.got[i].first, "child");
    EXPECT_EQ(encoded(log.got[i].second), encoded(messages[i])) << "message " << i;
  }
  EXPECT_EQ(log.got[2].second.get<bulk_chunk>()->data, pattern(64u << 20, 7));
  sync.publish(1, 1);
  EXPECT_EQ(wait_child(child), 0);
  // A clean stop of the child is reported too (its inbox closed, its ring slot closed).
  const auto deadline = clock_type::now() + 2s;
  while (clock_type::now() < deadline && parent.send("child", messages[0]) == send_status::ok)
    std::this_thread::yield();
  EXPECT_NE(parent.send("child", messages[0]), send_status::ok);
  parent.stop();
  std::lock_guard lock(down_mutex);
  EXPECT_EQ(down, std::vector<peer_id>{"child"});
}

TEST_F(shm_fixture, a_peer_killed_mid_transfer_is_reported_and_leaves_nothing_behind) {
  auto sync = shm_region::create(cluster, "sync", 0, 1);
  const pid_t child = fork_child([&] {
    register_control_messages();
    shm_plane plane(cluster, "victim");
    plane.set_handler([](const peer_id&, envelope) {});
    plane.start();
    shm_region::open(cluster, "sync").publish(0, 1);
    // Streams 64 MiB chunks until it is killed.
    auto chunk = make_envelope(bulk_chunk{1, 0, 64u << 20, std::vector<char>(64u << 20, 'v')});
    for (;;)
      if (send_retrying(plane, "survivor", chunk, 30s) != send_status::ok) return 6;
  });
  shm_plane survivor(cluster, "survivor");
  std::mutex m;
  std::condition_variable cv;
  int chunks = 0;
  std::optional<clock_type::time_point> down_at;
  peer_id down_peer;
  survivor.set_handler([&](const peer_id&, envelope e) {
    std::lock_guard lock(m);
    chunks += e.is<bulk_chunk>();
    cv.notify_all();
  });
  survivor.set_disconnect_handler([&](const peer_id& p) {
    std::lock_guard lock(m);
    down_at = clock_type::now();
    down_peer = p;
    cv.notify_all();
  });
  survivor.start();
  ASSERT_TRUE(sync.wait(0, 1, 20s));
  ASSERT_EQ(survivor.send("victim", make_envelope(ping{})),
            send_status::ok); // an outbound ring too
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return chunks >= 1; }));
  }
  const auto killed_at = clock_type::now();
  ASSERT_EQ(kill(child, SIGKILL), 0); // the child is streaming its next chunk
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, 2s, [&] { return down_at.has_value(); })) << "not reported";
    EXPECT_LT(*down_at - killed_at, 2s);
    EXPECT_EQ(down_peer, "victim");
    std::printf("[ info ] SIGKILL reported after %.1f ms\n",
                std::chrono::duration<double, std::milli>(*down_at - killed_at).count());
  }
  EXPECT_EQ(wait_child(child), 128 + SIGKILL);
  // Until a victim of that name connects again, what it sent before it died is no sign of life.
  EXPECT_TRUE(survivor.link_down("victim"));
  EXPECT_FALSE(survivor.link_down("never-seen"));
  // Sends to the dead peer answer at once instead of hanging.
  const auto t0 = clock_type::now();
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(survivor.send("victim", make_envelope(ping{})), send_status::peer_down);
  EXPECT_LT(clock_type::now() - t0, 1s);
  survivor.stop();
  sync = shm_region();
  cleanup_stale_segments(cluster);
  EXPECT_TRUE(list_segments(cluster).empty());
}

// ---- identity and healing -------------------------------------------------------------

TEST_F(shm_fixture, a_ring_claiming_another_instance_is_refused_and_the_real_one_still_heard) {
  key_folder keys({"prefill-0", "decode-0", "decode-1"});
  std::ostringstream logged;
  supernode::log::redirect_for_testing(&logged);
  inbox_log log; // outlives the plane, whose receive thread delivers into it
  shm_plane prefill(cluster, "prefill-0", keys.options());
  prefill.set_handler(log.handler());
  prefill.start();
  const auto& refused = prefill.counters().identity_mismatch;
  {
    // decode-0 under the wrong identity's keys: a pair of its own, not the cluster's (with the
    // cluster's public key of prefill-0, which anyone may read).
    key_folder other({"decode-0"});
    std::filesystem::copy_file(keys.dir / "prefill-0.public", other.dir / "prefill-0.public");
    shm_plane impostor(cluster, "decode-0", other.options());
    ASSERT_EQ(impostor.send("prefill-0", make_envelope(ping{1, 0, {}})), send_status::ok);
    ASSERT_TRUE(eventually([&] { return refused.load() == 1; }));
  }
  // The real decode-0 is heard, while decode-1 signs rings claiming to be decode-0 beside it.
  shm_plane decode0(cluster, "decode-0", keys.options());
  shm_plane decode1(cluster, "decode-1", keys.options());
  ASSERT_EQ(decode0.send("prefill-0", make_envelope(ping{2, 0, {}})), send_status::ok);
  ASSERT_TRUE(log.wait_for(1));
  ASSERT_EQ(decode1.send_claiming_for_test("decode-0", "prefill-0", make_envelope(ping{3, 0, {}})),
            send_status::ok);
  ASSERT_TRUE(eventually([&] { return refused.load() == 2; }));
  // An unauthenticated ring (no keys at all) is refused the same way.
  shm_plane keyless(cluster, "decode-2");
  ASSERT_EQ(keyless.send("prefill-0", make_envelope(ping{4, 0, {}})), send_status::ok);
  ASSERT_TRUE(eventually([&] { return refused.load() == 3; }));
  ASSERT_EQ(decode0.send("prefill-0", make_envelope(ping{5, 0, {}})), send_status::ok);
  ASSERT_TRUE(log.wait_for(2));
  {
    std::lock_guard lock(log.m);
    ASSERT_EQ(log.got.size(), 2u) << "a refused ring was read";
    for (auto& [from, e] : log.got) EXPECT_EQ(from, "decode-0");
    EXPECT_EQ(log.got[0].second.get<ping>()->seq, 2u);
    EXPECT_EQ(log.got[1].second.get<ping>()->seq, 5u);
  }
  EXPECT_EQ(prefill.counters().bad_frames.total(), 0u);
  prefill.stop();
  supernode::log::redirect_for_testing(nullptr);
  EXPECT_NE(logged.str().find("claiming to be from decode-0: its MAC does not verify"),
            std::string::npos)
      << logged.str();
}

TEST_F(shm_fixture, a_sender_whose_ring_was_dropped_for_garbage_is_heard_again) {
  key_folder keys({"a", "b"});
  inbox_log log; // outlives the plane, whose receive thread delivers into it
  shm_plane a(cluster, "a", keys.options()), b(cluster, "b", keys.options());
  std::atomic<int> downs{0};
  b.set_disconnect_handler([&](const peer_id&) { ++downs; });
  b.set_handler(log.handler());
  b.start();
  ASSERT_EQ(a.send("b", make_envelope(ping{1, 0, {}})), send_status::ok);
  ASSERT_TRUE(log.wait_for(1));
  // A scribbled ring: b stops reading it and frees its slot.
  ASSERT_EQ(a.corrupt_ring_for_test("b"), send_status::ok);
  ASSERT_TRUE(eventually([&] { return b.counters().bad_frames.get(frame_error::truncated) == 1; }));
  // a's next sends go over a fresh ring (one sent before b freed the slot may be lost with the
  // old ring: the loop sends until one arrives).
  uint64_t seq = 2;
  const auto deadline = clock_type::now() + 20s;
  while (!log.wait_for(2, 10ms) && clock_type::now() < deadline)
    ASSERT_EQ(a.send("b", make_envelope(ping{seq++, 0, {}})), send_status::ok);
  ASSERT_TRUE(log.wait_for(2)) << "a is never heard again";
  // From here every frame arrives, in order, and b never took a for dead.
  const size_t before = log.got.size();
  for (uint64_t i = 0; i < 20; ++i)
    ASSERT_EQ(send_retrying(a, "b", make_envelope(ping{1000 + i, 0, {}})), send_status::ok);
  ASSERT_TRUE(log.wait_for(before + 20));
  {
    std::lock_guard lock(log.m);
    for (uint64_t i = 0; i < 20; ++i)
      EXPECT_EQ(log.got[before + i].second.get<ping>()->seq, 1000 + i);
  }
  EXPECT_EQ(downs.load(), 0);
  EXPECT_EQ(b.counters().identity_mismatch.load(), 0u);
}
