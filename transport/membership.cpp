#include "transport/membership.hpp"

#include <algorithm>
#include <atomic>
#include <unistd.h>
#include <utility>

namespace supernode::transport {

const char* to_string(member_state s) {
  switch (s) {
  case member_state::alive:
    return "alive";
  case member_state::down:
    return "down";
  case member_state::left:
    return "left";
  }
  return "unknown";
}

namespace {
// A member that is down, heard from in the same incarnation while a plane has its connection
// down: a message it sent before it died, queued behind the drop.
bool queued_before_the_drop(const member& m, uint64_t incarnation, bool links_up) {
  return m.state == member_state::down && !links_up && m.incarnation == incarnation;
}
} // namespace

std::vector<membership_event> membership::on_join(const member_join& m, steady_time now,
                                                  bool links_up) {
  std::vector<membership_event> events;
  auto it = members_.find(m.peer);
  if (it != members_.end() && it->second.fenced && it->second.incarnation == m.incarnation)
    return events; // the fenced process itself: only a new incarnation comes back
  if (it != members_.end() && queued_before_the_drop(it->second, m.incarnation, links_up))
    return events;
  if (it != members_.end() && it->second.state == member_state::alive) {
    // A repeated join, or the first word of a config member not heard from yet: nothing was
    // known of an earlier process, so nothing went down. Refresh what the join tells.
    if (it->second.incarnation == m.incarnation || it->second.incarnation == 0) {
      it->second.incarnation = m.incarnation;
      it->second.endpoints = m.endpoints;
      if (it->second.role.empty()) it->second.role = m.role;
      it->second.last_heard = now;
      return events;
    }
    events.push_back({membership_event::kind::down, m.peer, "restarted with a new incarnation"});
  }
  members_[m.peer] = member{m.peer, m.role, m.incarnation, m.endpoints, member_state::alive, now};
  events.push_back({membership_event::kind::joined, m.peer, "joined as " + m.role});
  return events;
}

std::vector<membership_event> membership::on_leave(const member_leave& m, steady_time) {
  auto it = members_.find(m.peer);
  if (it == members_.end() || it->second.state == member_state::left) return {};
  const bool was_alive = it->second.state == member_state::alive;
  it->second.state = member_state::left; // a member already reported down leaves quietly
  it->second.leave_reported = false;
  // A config member not heard from yet: the leave says which process it was, for the
  // directories this process hands to members joining later.
  if (it->second.incarnation == 0) it->second.incarnation = m.incarnation;
  if (!was_alive) return {};
  return {{membership_event::kind::left, m.peer, m.reason}};
}

std::vector<membership_event> membership::on_reported_leave(const member_leave& m,
                                                            steady_time now) {
  auto it = members_.find(m.peer);
  if (it == members_.end() || it->second.state == member_state::left) return {};
  if (it->second.incarnation != 0 && it->second.incarnation >= m.incarnation) return {};
  it->second.incarnation = m.incarnation;
  it->second.fenced = false; // an older process's fence: the one that left is another
  auto events = on_leave(m, now);
  it->second.leave_reported = true;
  return events;
}

uint64_t new_incarnation() {
  static std::atomic<uint64_t> starts{0};
  const auto now = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
  return (now & ~uint64_t{0xffff}) | ((static_cast<uint64_t>(::getpid()) + ++starts) & 0xffff);
}

std::vector<membership_event> membership::on_message(const std::string& peer, steady_time now,
                                                     bool links_up) {
  auto it = members_.find(peer);
  if (it == members_.end() || it->second.state == member_state::left || it->second.fenced)
    return {};
  if (queued_before_the_drop(it->second, it->second.incarnation, links_up)) return {};
  it->second.last_heard = now;
  if (it->second.state != member_state::down || it->second.incarnation != 0) return {};
  it->second.state = member_state::alive;
  return {{membership_event::kind::joined, peer, "a message arrived"}};
}

bool membership::sender_unconfirmed(const std::string& peer, bool links_up) const {
  const member* m = find(peer);
  if (!m || m->state == member_state::left || m->incarnation == 0) return false;
  return m->fenced || (m->state == member_state::down && links_up);
}

std::vector<membership_event> membership::on_heartbeat(const heartbeat& h, steady_time now,
                                                       bool links_up) {
  auto it = members_.find(h.sender);
  if (it == members_.end()) return {}; // heartbeats do not make members; joins (or the config) do
  auto& m = it->second;
  if (queued_before_the_drop(m, h.incarnation, links_up)) return {};
  if (m.incarnation == 0 && h.incarnation != 0) {
    // A member known from the config: its first heartbeat tells us which process it is.
    m.incarnation = h.incarnation;
  }
  if (h.incarnation != m.incarnation) {
    if (h.incarnation < m.incarnation)
      return {}; // a late heartbeat of a process we already replaced
    std::vector<membership_event> events;
    if (m.state == member_state::alive)
      events.push_back({membership_event::kind::down, m.id, "restarted with a new incarnation"});
    m.incarnation = h.incarnation;
    m.state = member_state::alive;
    m.fenced = false;
    m.last_heard = now;
    events.push_back({membership_event::kind::joined, m.id, "rejoined after a restart"});
    return events;
  }
  if (m.fenced) return {}; // the hung process woke: it stays down
  m.last_heard = now;
  if (m.state == member_state::down) {
    m.state = member_state::alive;
    return {{membership_event::kind::joined, m.id, "heartbeats resumed"}};
  }
  if (m.state == member_state::left && m.leave_reported) {
    // Another member said it left; it says otherwise. (A leave it sent itself is final for the
    // incarnation: heartbeats queued behind it are no sign of life.)
    m.state = member_state::alive;
    m.leave_reported = false;
    return {{membership_event::kind::joined, m.id, "heard from after a reported leave"}};
  }
  return {};
}

std::vector<membership_event> membership::on_disconnect(const std::string& peer,
                                                        const std::string& reason, steady_time) {
  auto it = members_.find(peer);
  if (it == members_.end() || it->second.state != member_state::alive) return {};
  it->second.state = member_state::down;
  return {{membership_event::kind::down, peer, reason}};
}

std::vector<membership_event> membership::tick(steady_time now, steady_time read_up_to) {
  std::vector<membership_event> events;
  const auto limit = options_.bound();
  const auto previous = std::exchange(last_tick_, now);
  last_pause_ = std::chrono::nanoseconds(0);
  const auto gap = previous ? now - *previous : std::chrono::nanoseconds(0);
  if (gap > std::min(limit, 2 * options_.heartbeat_interval)) {
    // A late tick: this process (or its machine) stalled, and heartbeats it would have read
    // meanwhile may still be queued. Past the whole bound every peer looks silent, and declaring
    // them down (and fencing them) would let the one stale process evict the healthy ones: each
    // gets a fresh bound. Within it the stall is credited to every peer, so only silence this
    // process was awake to see counts (every process of a loaded two-core machine's cluster
    // stalled for 1.5 s at once).
    const bool paused = gap > limit;
    const auto credit = gap - options_.heartbeat_interval;
    for (auto& [id, m] : members_)
      if (m.state == member_state::alive)
        m.last_heard = std::max(m.last_heard, paused ? now : std::min(now, m.last_heard + credit));
    if (paused) {
      last_pause_ = gap;
      return events;
    }
  }
  for (auto& [id, m] : members_)
    if (m.state == member_state::alive && read_up_to - m.last_heard > limit) {
      m.state = member_state::down;
      m.fenced = m.incarnation != 0;
      events.push_back({membership_event::kind::down, id,
                        "no heartbeat for " +
                            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               read_up_to - m.last_heard)
                                               .count()) +
                            " ms"});
    }
  return events;
}

const member* membership::find(const std::string& id) const {
  auto it = members_.find(id);
  return it == members_.end() ? nullptr : &it->second;
}

bool membership::is_fenced(const std::string& id) const {
  auto m = find(id);
  return m && m->fenced;
}

bool membership::is_alive(const std::string& id) const {
  auto m = find(id);
  return m && m->state == member_state::alive;
}

std::vector<const member*> membership::alive_with_role(const std::string& role) const {
  std::vector<const member*> out;
  for (auto& [id, m] : members_)
    if (m.state == member_state::alive && m.role == role) out.push_back(&m);
  return out;
}

} // namespace supernode::transport
