#include "transport/control_messages.hpp"
#include "transport/inproc_plane.hpp"

#include <future>
#include <gtest/gtest.h>

using namespace supernode::transport;
using namespace std::chrono_literals;

TEST(inproc_plane, hands_over_the_object_without_copying) {
  register_control_messages();
  auto hub = inproc_hub::create();
  inproc_plane a(hub, "a"), b(hub, "b");
  std::promise<std::pair<peer_id, envelope>> got;
  b.set_handler([&](const peer_id& from, envelope m) { got.set_value({from, std::move(m)}); });
  a.start();
  b.start();
  auto msg = make_envelope(bulk_chunk{1, 0, 4, {'a', 'b', 'c', 'd'}});
  ASSERT_EQ(a.send("b", msg), send_status::ok);
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  auto [from, m] = f.get();
  EXPECT_EQ(from, "a");
  EXPECT_EQ(m.object().get(), msg.object().get()); // the same object, not a copy
  EXPECT_EQ(a.send("nobody", msg), send_status::unknown_peer);
}

TEST(inproc_plane, bounded_queue_pushes_back) {
  auto hub = inproc_hub::create();
  inproc_plane a(hub, "a"), b(hub, "b", 2); // b never started: nothing drains its queue
  auto msg = make_envelope(ping{});
  EXPECT_EQ(a.send("b", msg), send_status::ok);
  EXPECT_EQ(a.send("b", msg), send_status::ok);
  EXPECT_EQ(a.send("b", msg), send_status::queue_full);
  EXPECT_EQ(a.counters().queue_full.load(), 1u);
  b.stop();
  EXPECT_EQ(a.send("b", msg), send_status::closed);
}
