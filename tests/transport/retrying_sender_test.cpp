// Sends that meet a full queue wait on the sender's thread, in order per destination, until
// their deadline; other failures are final at once. A scripted plane stands in for the real
// ones: it answers queue_full while the test holds it "full".

#include "transport/control_messages.hpp"
#include "transport/retrying_sender.hpp"

#include <condition_variable>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <vector>

using namespace supernode::transport;
using namespace std::chrono_literals;

namespace {

// What the plane accepted, per destination, and whether it is full for a peer.
struct scripted_plane {
  std::mutex m;
  std::condition_variable cv;
  std::map<peer_id, bool> full;
  std::map<peer_id, send_status> broken;               // answered instead of ok
  std::vector<std::pair<peer_id, uint64_t>> delivered; // (peer, ping seq)
  std::vector<std::pair<uint64_t, send_status>> failed;

  send_status send(const peer_id& to, const envelope& message) {
    std::lock_guard lock(m);
    if (auto b = broken.find(to); b != broken.end()) return b->second;
    if (full[to]) return send_status::queue_full;
    delivered.emplace_back(to, message.get<ping>()->seq);
    cv.notify_all();
    return send_status::ok;
  }
  template<class Pred>
  bool wait_for(Pred pred, std::chrono::seconds timeout = 10s) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, timeout, pred);
  }
  void set_full(const peer_id& p, bool f) {
    std::lock_guard lock(m);
    full[p] = f;
  }
};

envelope ping_number(uint64_t seq) {
  return make_envelope(ping{seq, 0, {}});
}

} // namespace

TEST(retrying_sender, a_full_queue_is_waited_out_in_order_and_others_are_not_held_up) {
  register_control_messages();
  scripted_plane plane;
  retrying_sender sender(
      [&](const std::string&, const peer_id& to, const envelope& m) { return plane.send(to, m); });
  plane.set_full("a", true);
  for (uint64_t i = 1; i <= 3; ++i)
    EXPECT_EQ(sender.send("control", "a", ping_number(i)), send_status::ok);
  // b is not full: its message goes at once, ahead of a's queued ones.
  EXPECT_EQ(sender.send("control", "b", ping_number(10)), send_status::ok);
  {
    std::lock_guard lock(plane.m);
    ASSERT_EQ(plane.delivered.size(), 1u);
    EXPECT_EQ(plane.delivered[0], (std::pair<peer_id, uint64_t>{"b", 10}));
  }
  EXPECT_EQ(sender.queued(), 3u);
  // A message to a while its queue drains goes behind the others, never ahead.
  plane.set_full("a", false);
  EXPECT_EQ(sender.send("control", "a", ping_number(4)), send_status::ok);
  ASSERT_TRUE(plane.wait_for([&] { return plane.delivered.size() == 5; }));
  std::vector<uint64_t> to_a;
  {
    std::lock_guard lock(plane.m);
    for (auto& [peer, seq] : plane.delivered)
      if (peer == "a") to_a.push_back(seq);
  }
  EXPECT_EQ(to_a, (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(sender.given_up(), 0u);
}

TEST(retrying_sender, a_deadline_or_a_final_failure_gives_up_and_reports_each_message) {
  register_control_messages();
  scripted_plane plane;
  retrying_sender sender(
      [&](const std::string&, const peer_id& to, const envelope& m) { return plane.send(to, m); });
  sender.set_failure_handler(
      [&](const std::string&, const peer_id&, const envelope& m, send_status last) {
        std::lock_guard lock(plane.m);
        plane.failed.emplace_back(m.get<ping>()->seq, last);
        plane.cv.notify_all();
      });
  // A peer known down fails at once; nothing is queued.
  {
    std::lock_guard lock(plane.m);
    plane.broken["gone"] = send_status::peer_down;
  }
  EXPECT_EQ(sender.send("control", "gone", ping_number(1)), send_status::peer_down);
  EXPECT_EQ(sender.queued(), 0u);
  // A queue that stays full past the deadline: both queued messages are given up, in order.
  plane.set_full("slow", true);
  sender.send("control", "slow", ping_number(2), 20ms);
  sender.send("control", "slow", ping_number(3), 20ms);
  ASSERT_TRUE(plane.wait_for([&] { return plane.failed.size() == 2; }));
  {
    std::lock_guard lock(plane.m);
    EXPECT_EQ(plane.failed[0], (std::pair<uint64_t, send_status>{2, send_status::queue_full}));
    EXPECT_EQ(plane.failed[1].first, 3u);
  }
  EXPECT_EQ(sender.given_up(), 2u);
  EXPECT_EQ(sender.queued(), 0u);
  // Stopping reports what is still queued as closed, and refuses new sends.
  plane.set_full("slow", true);
  sender.send("control", "slow", ping_number(4));
  sender.stop();
  {
    std::lock_guard lock(plane.m);
    ASSERT_EQ(plane.failed.size(), 3u);
    EXPECT_EQ(plane.failed[2], (std::pair<uint64_t, send_status>{4, send_status::closed}));
  }
  EXPECT_EQ(sender.send("control", "b", ping_number(5)), send_status::closed);
}
