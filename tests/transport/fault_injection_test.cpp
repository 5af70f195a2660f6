// The plane-fault injector over an inproc plane pair: its window, its seeded rate and each kind
// of fault, with a clock the test sets; and the storage faults' windows. Ordering is the
// plane's: "a" -> "b" frames arrive in the order they were handed over, so a marker sent last
// tells when everything before it is in.

#include "transport/control_messages.hpp"
#include "transport/fault_injection.hpp"
#include "transport/inproc_plane.hpp"
#include "transport/storage_faults.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <mutex>
#include <set>
#include <unistd.h>

using namespace supernode::transport;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t marker_seq = ~uint64_t{0};

// Two inproc planes; what "b" receives is kept for the test to look at.
struct plane_pair {
  std::shared_ptr<inproc_hub> hub = inproc_hub::create();
  inproc_plane a{hub, "a"}, b{hub, "b"};
  std::mutex m;
  std::condition_variable cv;
  std::vector<envelope> received;

  plane_pair() {
    register_control_messages();
    b.set_handler([this](const peer_id&, envelope e) {
      std::lock_guard lock(m);
      received.push_back(std::move(e));
      cv.notify_all();
    });
    a.start();
    b.start();
  }
  fault_injector::send_function to_b() {
    return [this](const envelope& e) { return a.send("b", e); };
  }
  // Sends the marker around the injector and waits until it is in; false on timeout.
  bool flush() {
    a.send("b", make_envelope(ping{marker_seq, 0, {}}));
    std::unique_lock lock(m);
    return cv.wait_for(lock, 10s, [&] {
      return !received.empty() && received.back().get<ping>() &&
             received.back().get<ping>()->seq == marker_seq;
    });
  }
  // The seqs that arrived, marker excluded.
  std::vector<uint64_t> seqs() {
    std::lock_guard lock(m);
    std::vector<uint64_t> out;
    for (auto& e : received)
      if (auto* p = e.get<ping>(); p && p->seq != marker_seq) out.push_back(p->seq);
    return out;
  }
};

struct fake_clock {
  std::shared_ptr<std::atomic<double>> now = std::make_shared<std::atomic<double>>(1000.0);
  fault_injector::clock_function function() const {
    return [now = now] { return now->load(); };
  }
};

plane_fault_plan one_fault(plane_fault_kind kind, double rate, int64_t delay_ms = 0) {
  plane_fault_plan plan;
  plan.epoch_s = 1000.0;
  plan.seed = 7;
  plan.faults.push_back({kind, "control", "", 10.0, 5.0, rate, delay_ms});
  return plan;
}

envelope ping_of(uint64_t seq) {
  return make_envelope(ping{seq, 0, {}});
}

} // namespace

TEST(fault_injection, a_drop_takes_only_frames_of_its_flow_inside_its_window) {
  plane_pair planes;
  fake_clock clock;
  fault_injector injector(one_fault(plane_fault_kind::drop, 1.0), "decode-0", {}, {},
                          clock.function());
  EXPECT_EQ(injector.send("control", ping_of(1), planes.to_b()), send_status::ok); // before
  clock.now->store(1010.0);                                                        // at_s
  EXPECT_EQ(injector.send("control", ping_of(2), planes.to_b()), send_status::ok); // dropped
  EXPECT_EQ(injector.send("bulk", ping_of(3), planes.to_b()), send_status::ok);    // other flow
  clock.now->store(1014.99);
  EXPECT_EQ(injector.send("control", ping_of(4), planes.to_b()), send_status::ok); // dropped
  clock.now->store(1015.0);                                                        // ended
  EXPECT_EQ(injector.send("control", ping_of(5), planes.to_b()), send_status::ok);
  ASSERT_TRUE(planes.flush());
  EXPECT_EQ(planes.seqs(), (std::vector<uint64_t>{1, 3, 5}));
  EXPECT_EQ(injector.injected(plane_fault_kind::drop), 2u);
}

TEST(fault_injection, the_rate_is_a_seeded_fraction_the_same_every_run) {
  auto dropped_with = [](uint64_t seed) {
    plane_pair planes;
    fake_clock clock;
    clock.now->store(1011.0);
    auto plan = one_fault(plane_fault_kind::drop, 0.3);
    plan.seed = seed;
    fault_injector injector(plan, "decode-0", {}, {}, clock.function());
    for (uint64_t i = 0; i < 2000; ++i) injector.send("control", ping_of(i), planes.to_b());
    EXPECT_TRUE(planes.flush());
    const auto got = planes.seqs();
    std::set<uint64_t> arrived(got.begin(), got.end());
    std::vector<uint64_t> dropped;
    for (uint64_t i = 0; i < 2000; ++i)
      if (!arrived.count(i)) dropped.push_back(i);
    EXPECT_EQ(dropped.size(), injector.injected(plane_fault_kind::drop));
    return dropped;
  };
  const auto first = dropped_with(7);
  EXPECT_GT(first.size(), 500u); // 30 % of 2000 is 600; splitmix64 lands well inside this
  EXPECT_LT(first.size(), 700u);
  EXPECT_EQ(dropped_with(7), first);
  EXPECT_NE(dropped_with(8), first);
}

TEST(fault_injection, a_duplicate_arrives_twice) {
  plane_pair planes;
  fake_clock clock;
  clock.now->store(1012.0);
  fault_injector injector(one_fault(plane_fault_kind::duplicate, 1.0), "decode-0", {}, {},
                          clock.function());
  EXPECT_EQ(injector.send("control", ping_of(1), planes.to_b()), send_status::ok);
  EXPECT_EQ(injector.send("control", ping_of(2), planes.to_b()), send_status::ok);
  ASSERT_TRUE(planes.flush());
  EXPECT_EQ(planes.seqs(), (std::vector<uint64_t>{1, 1, 2, 2}));
  EXPECT_EQ(injector.injected(plane_fault_kind::duplicate), 2u);
}

TEST(fault_injection, a_corrupted_frame_is_refused_or_arrives_altered_never_intact) {
  plane_pair planes;
  fake_clock clock;
  clock.now->store(1012.0);
  fault_injector injector(one_fault(plane_fault_kind::corrupt, 1.0), "decode-0", {}, {},
                          clock.function());
  // Every seq's 8 bytes differ from every other's, so one flipped byte cannot turn a frame into
  // another intact one; no field has its default, so a flip that loses a key alters the message.
  constexpr uint64_t frames = 200;
  std::set<std::string> intact;
  for (uint64_t i = 0; i < frames; ++i) {
    const auto e = make_envelope(
        ping{0x0101010101010101ull * (i + 1), 42, shared_bytes(std::vector<char>{'x', 'y'})});
    const auto bytes = e.encode();
    intact.insert(std::string(bytes.data.get(), bytes.size));
    EXPECT_EQ(injector.send("control", e, planes.to_b()), send_status::ok);
  }
  ASSERT_TRUE(planes.flush());
  EXPECT_EQ(injector.injected(plane_fault_kind::corrupt), frames);
  std::lock_guard lock(planes.m);
  const uint64_t delivered = planes.received.size() - 1; // the marker
  EXPECT_EQ(delivered + injector.corrupt_refused(), frames);
  EXPECT_GT(injector.corrupt_refused(), 0u); // most flips break the frame or its MessagePack
  for (size_t i = 0; i + 1 < planes.received.size(); ++i) {
    const auto bytes = planes.received[i].encode();
    EXPECT_FALSE(intact.count(std::string(bytes.data.get(), bytes.size)))
        << "frame " << i << " arrived unaltered";
  }
}

TEST(fault_injection, a_delayed_frame_leaves_later_without_blocking_the_sender) {
  plane_pair planes;
  fake_clock clock;
  clock.now->store(1012.0);
  fault_injector injector(one_fault(plane_fault_kind::delay, 1.0, 300), "decode-0", {}, {},
                          clock.function());
  const auto sent = std::chrono::steady_clock::now();
  EXPECT_EQ(injector.send("control", ping_of(1), planes.to_b()), send_status::ok);
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 250ms); // handed to the timer, not slept
  std::unique_lock lock(planes.m);
  ASSERT_TRUE(planes.cv.wait_for(lock, 10s, [&] { return !planes.received.empty(); }));
  EXPECT_GE(std::chrono::steady_clock::now() - sent, 300ms);
  EXPECT_EQ(planes.received[0].get<ping>()->seq, 1u);
}

TEST(fault_injection, a_fault_for_another_process_does_nothing_here) {
  plane_pair planes;
  fake_clock clock;
  clock.now->store(1012.0);
  auto plan = one_fault(plane_fault_kind::drop, 1.0);
  plan.faults[0].process = "decode-1";
  fault_injector injector(plan, "decode-0", {}, {}, clock.function());
  injector.send("control", ping_of(1), planes.to_b());
  ASSERT_TRUE(planes.flush());
  EXPECT_EQ(planes.seqs(), (std::vector<uint64_t>{1}));
}

TEST(fault_injection, without_an_epoch_the_clock_starts_when_the_epoch_file_appears) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("fault-injection-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto epoch_file = dir / "plan.toml.epoch";
  plane_pair planes;
  fake_clock clock;
  clock.now->store(1012.0);
  auto plan = one_fault(plane_fault_kind::drop, 1.0);
  plan.epoch_s.reset();
  fault_injector injector(plan, "decode-0", {}, epoch_file.string(), clock.function());
  injector.send("control", ping_of(1), planes.to_b()); // not armed: sent
  std::ofstream(epoch_file) << "1000.0\n";
  clock.now->store(1012.1);                            // past the 50 ms between looks
  injector.send("control", ping_of(2), planes.to_b()); // armed, inside the window: dropped
  ASSERT_TRUE(planes.flush());
  EXPECT_EQ(planes.seqs(), (std::vector<uint64_t>{1}));
  std::filesystem::remove_all(dir);
}

TEST(fault_injection, the_plan_file_reads_back_what_was_written) {
  plane_fault_plan plan;
  plan.epoch_s = 1764600000.25;
  plan.seed = 9;
  plan.faults.push_back({plane_fault_kind::delay, "bulk", "prefill-1", 4.5, 2.0, 0.25, 150});
  plan.faults.push_back({plane_fault_kind::corrupt, "control", "", 1.0, 1.0, 1.0, 0});
  const auto back = parse_plane_fault_plan(plane_fault_plan_text(plan), "plan");
  ASSERT_EQ(back.faults.size(), 2u);
  EXPECT_EQ(*back.epoch_s, 1764600000.25);
  EXPECT_EQ(back.seed, 9u);
  EXPECT_EQ(back.faults[0].kind, plane_fault_kind::delay);
  EXPECT_EQ(back.faults[0].flow, "bulk");
  EXPECT_EQ(back.faults[0].process, "prefill-1");
  EXPECT_EQ(back.faults[0].at_s, 4.5);
  EXPECT_EQ(back.faults[0].rate, 0.25);
  EXPECT_EQ(back.faults[0].delay_ms, 150);
  EXPECT_EQ(back.faults[1].kind, plane_fault_kind::corrupt);
  EXPECT_TRUE(back.faults[1].process.empty());
}

TEST(fault_injection, a_bad_plan_file_names_the_fault_and_key) {
  const std::string text = "[run]\nseed = 1\n[[fault]]\nkind = \"drop\"\nflow = \"control\"\n"
                           "at_s = 1.0\nduration_s = 1.0\n[[fault]]\nkind = \"drop\"\n"
                           "flow = \"control\"\nat_s = 1.0\nduration_s = 1.0\nrate = 2.0\n";
  try {
    parse_plane_fault_plan(text, "plan.toml");
    FAIL() << "accepted a rate of 2";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("plan.toml:13: [fault.1] rate must be in [0, 1]"),
              std::string::npos)
        << e.what();
  }
}

TEST(storage_faults, a_window_applies_to_its_kind_and_process_only) {
  plane_fault_plan plan;
  plan.epoch_s = 1000.0;
  plan.storage.push_back({storage_fault_kind::disk_full, "ems-1", 4.0, 2.0, 0});
  plan.storage.push_back({storage_fault_kind::slow_store, "", 1.0, 1.0, 250});
  fake_clock clock;
  storage_fault_table table(plan, {}, clock.function());
  clock.now->store(1004.5);
  EXPECT_TRUE(table.active(storage_fault_kind::disk_full, "ems-1"));
  EXPECT_FALSE(table.active(storage_fault_kind::disk_full, "ems-0"));
  EXPECT_FALSE(table.active(storage_fault_kind::disk_full, "")); // slot unknown: not this one
  EXPECT_FALSE(table.active(storage_fault_kind::slow_store, "ems-1"));
  clock.now->store(1001.5);
  const auto slow = table.active(storage_fault_kind::slow_store, "");
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->delay_ms, 250);
  clock.now->store(1006.0); // both windows over
  EXPECT_FALSE(table.active(storage_fault_kind::disk_full, "ems-1"));
  EXPECT_FALSE(table.active(storage_fault_kind::slow_store, ""));

  plan.seed = 3;
  const auto back = parse_plane_fault_plan(plane_fault_plan_text(plan), "plan");
  ASSERT_EQ(back.storage.size(), 2u);
  EXPECT_EQ(back.storage[0].kind, storage_fault_kind::disk_full);
  EXPECT_EQ(back.storage[0].process, "ems-1");
  EXPECT_EQ(back.storage[0].at_s, 4.0);
  EXPECT_EQ(back.storage[1].kind, storage_fault_kind::slow_store);
  EXPECT_EQ(back.storage[1].delay_ms, 250);
}
