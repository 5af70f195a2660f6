#include "transport/membership.hpp"
#include "transport/pending_requests.hpp"

#include <gtest/gtest.h>

using namespace supernode::transport;
using namespace std::chrono_literals;

namespace {
steady_time t0 = steady_time{} + 1h;
member_join join(const std::string& peer, uint64_t inc) {
  return {peer, "decode", inc, {{"vpc", "ipc:///tmp/" + peer}}};
}
} // namespace

TEST(membership, silent_peer_is_down_within_the_bound) {
  membership m({100ms, 5});
  EXPECT_EQ(m.on_join(join("d0", 1), t0).size(), 1u);
  EXPECT_TRUE(m.on_heartbeat({"d0", 1, 1}, t0 + 100ms).empty());
  EXPECT_TRUE(m.tick(t0 + 600ms).empty()); // 500 ms since the last heartbeat: not yet
  auto ev = m.tick(t0 + 601ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::down);
  EXPECT_NE(ev[0].reason.find("no heartbeat for 501 ms"), std::string::npos) << ev[0].reason;
  EXPECT_FALSE(m.is_alive("d0"));
  EXPECT_TRUE(m.tick(t0 + 2s).empty()); // reported once
  // Its work was recovered elsewhere: the incarnation is fenced and waking changes nothing.
  EXPECT_TRUE(m.is_fenced("d0"));
  EXPECT_TRUE(m.on_heartbeat({"d0", 1, 9}, t0 + 3s).empty());
  EXPECT_TRUE(m.on_message("d0", t0 + 3s).empty());
  EXPECT_TRUE(m.on_join(join("d0", 1), t0 + 3s).empty());
  EXPECT_FALSE(m.is_alive("d0"));
  // The process restarted as a new incarnation comes back.
  ev = m.on_heartbeat({"d0", 2, 1}, t0 + 4s);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::joined);
  EXPECT_TRUE(m.is_alive("d0"));
  EXPECT_FALSE(m.is_fenced("d0"));
}

TEST(membership, a_dropped_connection_does_not_fence) {
  membership m;
  m.on_join(join("p0", 1), t0);
  m.on_disconnect("p0", "connection dropped", t0 + 1ms);
  EXPECT_FALSE(m.is_fenced("p0"));
  auto ev = m.on_heartbeat({"p0", 1, 2}, t0 + 5ms); // it was still starting its planes
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::joined);
}

TEST(membership, what_a_process_sent_before_its_connection_dropped_does_not_revive_it) {
  membership m;
  m.on_join(join("p0", 1), t0);
  m.on_disconnect("p0", "connection dropped", t0 + 1ms);
  // Its last heartbeat, a reply and a join were still queued behind the drop: the links are
  // down, so none of them brings it back (a killed process's group would re-form over it).
  EXPECT_TRUE(m.on_heartbeat({"p0", 1, 2}, t0 + 2ms, /*links_up=*/false).empty());
  EXPECT_TRUE(m.on_message("p0", t0 + 2ms, /*links_up=*/false).empty());
  EXPECT_TRUE(m.on_join(join("p0", 1), t0 + 2ms, /*links_up=*/false).empty());
  EXPECT_FALSE(m.is_alive("p0"));
  // Its restart is a new incarnation, over links still down: it joins.
  auto ev = m.on_heartbeat({"p0", 2, 1}, t0 + 300ms, /*links_up=*/false);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::joined);
  EXPECT_TRUE(m.is_alive("p0"));
  // A process whose connection dropped and came back (it lives), or a restarted one: a message
  // cannot say which, so it revives nothing and waits for the next heartbeat, which does.
  m.on_disconnect("p0", "connection dropped", t0 + 400ms);
  EXPECT_FALSE(m.sender_unconfirmed("p0", /*links_up=*/false)); // sent before the drop
  EXPECT_TRUE(m.on_message("p0", t0 + 401ms, /*links_up=*/false).empty());
  EXPECT_TRUE(m.sender_unconfirmed("p0", /*links_up=*/true));
  EXPECT_TRUE(m.on_message("p0", t0 + 500ms, /*links_up=*/true).empty());
  EXPECT_FALSE(m.is_alive("p0"));
  ev = m.on_heartbeat({"p0", 2, 2}, t0 + 510ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::joined);
  EXPECT_TRUE(m.is_alive("p0"));
  EXPECT_FALSE(m.sender_unconfirmed("p0", /*links_up=*/true));
}

TEST(membership, a_message_of_a_fenced_member_waits_for_a_heartbeat_to_say_who_sent_it) {
  membership m({100ms, 5});
  m.on_join(join("p0", 1), t0);
  m.tick(t0 + 601ms); // silent: down and fenced
  ASSERT_TRUE(m.is_fenced("p0"));
  EXPECT_TRUE(m.sender_unconfirmed("p0", /*links_up=*/true));
  EXPECT_TRUE(m.sender_unconfirmed("p0", /*links_up=*/false));
  // Its restart's heartbeat settles it.
  m.on_heartbeat({"p0", 2, 1}, t0 + 700ms);
  EXPECT_FALSE(m.sender_unconfirmed("p0", /*links_up=*/true));
  // Not for a config member never heard from, nor one that left.
  m.on_join(join("q0", 0), t0);
  m.on_disconnect("q0", "connection dropped", t0 + 1ms);
  EXPECT_FALSE(m.sender_unconfirmed("q0", /*links_up=*/true));
  m.on_leave({"p0", "drained", 2}, t0 + 800ms);
  EXPECT_FALSE(m.sender_unconfirmed("p0", /*links_up=*/true));
  EXPECT_FALSE(m.sender_unconfirmed("stranger", /*links_up=*/true));
}

TEST(membership, disconnect_is_immediate_and_restart_is_a_new_member) {
  membership m;
  m.on_join(join("p0", 1), t0);
  auto ev = m.on_disconnect("p0", "connection dropped", t0 + 1ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::down);
  EXPECT_TRUE(m.on_disconnect("p0", "again", t0 + 2ms).empty());
  // The restarted process joins with a new incarnation; old-incarnation heartbeats are ignored.
  ev = m.on_join(join("p0", 2), t0 + 10ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(m.on_heartbeat({"p0", 1, 5}, t0 + 11ms).empty());
  EXPECT_EQ(m.find("p0")->incarnation, 2u);
  // A live member seen with a new incarnation: the old one went down, the new one joined.
  ev = m.on_heartbeat({"p0", 3, 1}, t0 + 20ms);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].what, membership_event::kind::down);
  EXPECT_EQ(ev[1].what, membership_event::kind::joined);
}

TEST(membership, leave_and_roles) {
  membership m;
  m.on_join(join("d0", 1), t0);
  m.on_join(join("d1", 1), t0);
  m.on_join({"p0", "prefill", 1, {}}, t0);
  EXPECT_EQ(m.alive_with_role("decode").size(), 2u);
  auto ev = m.on_leave({"d1", "drained"}, t0);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::left);
  EXPECT_EQ(m.alive_with_role("decode").size(), 1u);
  EXPECT_TRUE(m.on_heartbeat({"ghost", 1, 1}, t0).empty()); // heartbeats make no members
  EXPECT_EQ(m.size(), 3u);
}

TEST(membership, a_process_woken_from_a_pause_declares_nobody_down_for_its_own_silence) {
  membership m({100ms, 5});
  m.on_join(join("peer", 7), t0);
  EXPECT_TRUE(m.on_heartbeat({"peer", 7, 1}, t0).empty());
  EXPECT_TRUE(m.tick(t0 + 100ms).empty());
  // Stopped for 10 s: the next tick finds the peer silent for that long, but it was us.
  EXPECT_TRUE(m.tick(t0 + 10s).empty());
  EXPECT_EQ(m.last_pause(), 10s - 100ms);
  EXPECT_TRUE(m.is_alive("peer"));
  EXPECT_FALSE(m.is_fenced("peer"));
  // Its queued heartbeat arrives; a peer that really is silent goes down a bound later.
  EXPECT_TRUE(m.on_heartbeat({"peer", 7, 2}, t0 + 10s + 10ms).empty());
  for (auto t = t0 + 10s + 100ms; t <= t0 + 10s + 500ms; t += 100ms) EXPECT_TRUE(m.tick(t).empty());
  EXPECT_EQ(m.last_pause(), 0ns);
  const auto ev = m.tick(t0 + 10s + 600ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::down);
  EXPECT_TRUE(m.is_fenced("peer"));
}

TEST(membership, silence_counts_only_up_to_what_this_process_has_read) {
  membership m({100ms, 5}); // a 500 ms bound
  m.on_join(join("peer", 7), t0);
  EXPECT_TRUE(m.on_heartbeat({"peer", 7, 1}, t0).empty());
  // Ticks on time, but the receive thread has read nothing since t0 + 50 ms: the heartbeats of
  // the last second may be waiting in its socket.
  for (auto t = t0 + 100ms; t <= t0 + 1000ms; t += 100ms) EXPECT_TRUE(m.tick(t, t0 + 50ms).empty());
  EXPECT_TRUE(m.is_alive("peer"));
  EXPECT_FALSE(m.is_fenced("peer"));
  // Caught up, and still nothing from the peer past the bound: down.
  const auto ev = m.tick(t0 + 1100ms, t0 + 1050ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::down);
  EXPECT_EQ(ev[0].reason, "no heartbeat for 1050 ms");
  EXPECT_TRUE(m.is_fenced("peer"));
}

TEST(membership, a_late_tick_within_the_bound_counts_only_the_silence_seen_awake) {
  membership m({100ms, 5}); // a 500 ms bound
  m.on_join(join("peer", 7), t0);
  EXPECT_TRUE(m.on_heartbeat({"peer", 7, 1}, t0).empty());
  EXPECT_TRUE(m.tick(t0 + 100ms).empty());
  // This process stalls for 400 ms (its tick comes 400 ms late): not a pause past the bound.
  EXPECT_TRUE(m.tick(t0 + 600ms).empty());
  EXPECT_EQ(m.last_pause(), 0ns);
  // The stall counts as one interval of silence: 200 ms counted at 600 ms, 500 ms at 900 ms
  // (not yet past the bound), 600 ms at 1000 ms, so the peer goes down then and not before.
  EXPECT_TRUE(m.tick(t0 + 700ms).empty());
  EXPECT_TRUE(m.tick(t0 + 800ms).empty());
  EXPECT_TRUE(m.tick(t0 + 900ms).empty());
  const auto ev = m.tick(t0 + 1000ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::down);
  // Ticks on time credit nothing: a silent peer is down one bound after it was last heard.
  membership on_time({100ms, 5});
  on_time.on_join(join("peer", 7), t0);
  EXPECT_TRUE(on_time.on_heartbeat({"peer", 7, 1}, t0).empty());
  for (auto t = t0 + 100ms; t <= t0 + 500ms; t += 100ms) EXPECT_TRUE(on_time.tick(t).empty());
  EXPECT_EQ(on_time.tick(t0 + 600ms).size(), 1u);
}

TEST(membership, any_message_is_a_sign_of_life_but_not_for_a_member_that_left) {
  membership m({100ms, 5});
  m.on_join(join("late", 0), t0); // from the config: not yet heard from, so never fenced
  m.on_join(join("gone", 0), t0);
  EXPECT_EQ(m.tick(t0 + 601ms).size(), 2u); // both silent since the start: down
  // A process that started late sends a request before its first heartbeat arrives.
  auto ev = m.on_message("late", t0 + 700ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::joined);
  EXPECT_TRUE(m.is_alive("late"));
  EXPECT_TRUE(m.tick(t0 + 1100ms).empty());               // the message counted as heard from
  EXPECT_TRUE(m.on_message("late", t0 + 1150ms).empty()); // alive already: no event
  m.on_leave({"gone", "drained"}, t0 + 1200ms);
  EXPECT_TRUE(m.on_message("gone", t0 + 1300ms).empty());
  EXPECT_FALSE(m.is_alive("gone"));
  EXPECT_TRUE(m.on_message("stranger", t0).empty());
}

TEST(membership, a_leave_another_member_reports_is_taken_only_for_what_this_process_has_not_heard) {
  membership m({100ms, 5});
  // Config members not heard from yet (incarnation 0), and one heard from in incarnation 7.
  m.on_join(join("p0", 0), t0);
  m.on_join(join("p1", 0), t0);
  m.on_join(join("d0", 0), t0);
  m.on_heartbeat({"d0", 7, 1}, t0);

  // p0 left before this process started: it is gone, quietly, in the incarnation that left.
  auto ev = m.on_reported_leave({"p0", "left the cluster", 5}, t0 + 1ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::left);
  EXPECT_EQ(m.find("p0")->state, member_state::left);
  EXPECT_EQ(m.find("p0")->incarnation, 5u);
  // d0 spoke for itself in 7: another's word on 7 or an older process changes nothing.
  EXPECT_TRUE(m.on_reported_leave({"d0", "left the cluster", 7}, t0 + 1ms).empty());
  EXPECT_TRUE(m.on_reported_leave({"d0", "left the cluster", 6}, t0 + 1ms).empty());
  EXPECT_TRUE(m.is_alive("d0"));
  // A stranger is not made up, and a member that left is told only once.
  EXPECT_TRUE(m.on_reported_leave({"x9", "left the cluster", 3}, t0 + 1ms).empty());
  EXPECT_EQ(m.find("x9"), nullptr);
  EXPECT_TRUE(m.on_reported_leave({"p0", "left the cluster", 6}, t0 + 1ms).empty());

  // Silence past the bound: p1 (never heard from) is down, p0 (it left) is not reported.
  m.on_heartbeat({"d0", 7, 2}, t0 + 500ms);
  ev = m.tick(t0 + 601ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].peer, "p1");
  // The name comes back as a new process: a member again.
  ev = m.on_heartbeat({"p0", 9, 1}, t0 + 700ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::joined);
  EXPECT_TRUE(m.is_alive("p0"));
}

TEST(membership, a_member_that_speaks_for_itself_outranks_a_reported_leave_but_not_its_own) {
  membership m;
  m.on_join(join("p0", 0), t0);
  m.on_join(join("p1", 0), t0);
  m.on_reported_leave({"p0", "a directory: it left the cluster", 5}, t0 + 1ms);
  m.on_leave({"p1", "scaled in", 6}, t0 + 1ms);
  // p0's own heartbeat, in the very incarnation reported gone: it is alive after all.
  auto ev = m.on_heartbeat({"p0", 5, 1}, t0 + 2ms);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].what, membership_event::kind::joined);
  EXPECT_TRUE(m.is_alive("p0"));
  // p1 said it left: a heartbeat of that incarnation queued behind its leave changes nothing.
  EXPECT_TRUE(m.on_heartbeat({"p1", 6, 9}, t0 + 2ms).empty());
  EXPECT_FALSE(m.is_alive("p1"));
}

TEST(membership, a_first_hand_leave_of_a_member_not_heard_from_records_its_incarnation) {
  membership m;
  m.on_join(join("p0", 0), t0);
  m.on_leave({"p0", "scaled in", 12}, t0 + 1ms);
  EXPECT_EQ(m.find("p0")->state, member_state::left);
  EXPECT_EQ(m.find("p0")->incarnation, 12u); // what a directory for a later joiner will carry
}

TEST(pending_requests, replies_timeouts_and_dead_peers) {
  pending_requests p(3);
  std::vector<std::string> outcomes;
  auto record = [&](std::optional<envelope> reply, const std::string& error) {
    outcomes.push_back(reply ? "reply" : error);
  };
  auto a = p.add("d0", t0 + 100ms, record);
  auto b = p.add("d1", t0 + 50ms, record);
  auto c = p.add("d1", t0 + 500ms, record);
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(p.add("d2", t0, record)); // bounded
  EXPECT_EQ(*p.next_deadline(), t0 + 50ms);
  using outcome = pending_requests::reply_outcome;
  EXPECT_EQ(p.complete(*a, "other", make_envelope(pong{})), outcome::wrong_sender);
  EXPECT_EQ(p.complete(*a, "d0", make_envelope(pong{})), outcome::delivered);
  EXPECT_EQ(p.complete(*a, "d0", make_envelope(pong{})), outcome::late); // late duplicate dropped
  EXPECT_EQ(p.expire(t0 + 60ms), 1u);                                    // b
  EXPECT_EQ(p.fail_peer("d1", "no heartbeat"), 1u);                      // c
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0], "reply");
  EXPECT_EQ(outcomes[1], "request to d1 timed out");
  EXPECT_EQ(outcomes[2], "peer d1 is down: no heartbeat");
  EXPECT_EQ(p.size(), 0u);
}
