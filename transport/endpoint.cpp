#include "transport/endpoint.hpp"

#include "transport/control_messages.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>

namespace supernode::transport {

endpoint::endpoint(cluster_config cluster, const std::string& self, plane_factory factory,
                   uint64_t incarnation)
    : cluster_(std::move(cluster)), self_(cluster_.instance(self)), incarnation_(incarnation),
      log_(self_.name, incarnation_), membership_(cluster_.liveness()),
      retry_([this](const std::string& flow, const peer_id& to, const envelope& m) {
        return send(flow, to, m);
      }) {
  retry_.set_failure_handler(
      [this](const std::string& flow, const peer_id& to, const envelope& m, send_status last) {
        const auto* info = message_registry::instance().find(m.type());
        log_.warn("gave up sending {} to {} over {}: {}", info ? info->name : "a message", to, flow,
                  to_string(last));
      });
  register_control_messages();
  for (auto& [name, pc] : cluster_.planes) {
    auto p = factory(cluster_, pc, self_);
    p->set_logger(log_);
    p->set_handler([this](const peer_id& from, envelope m) { on_message(from, std::move(m)); });
    p->set_disconnect_handler([this](const peer_id& peer, const std::string& reason) {
      std::vector<membership_event> events;
      {
        std::lock_guard lock(mutex_);
        events = membership_.on_disconnect(peer, reason, std::chrono::steady_clock::now());
      }
      emit(events);
    });
    planes_[name] = std::move(p);
  }
  faults_ = fault_injector::from_environment(self_, log_);
  // Every instance of the config is a member from the start: the config is the directory.
  const auto now = std::chrono::steady_clock::now();
  for (auto& inst : cluster_.instances()) {
    if (inst.name == self_.name) continue;
    member_join j{inst.name, inst.role, 0, {}};
    for (auto& [name, pc] : cluster_.planes)
      j.endpoints[name] = cluster_.address(inst, pc, "control");
    membership_.on_join(j, now);
  }
}

endpoint::~endpoint() {
  stop();
}

void endpoint::set_message_handler(message_handler h) {
  on_message_ = std::move(h);
}
void endpoint::set_event_handler(event_handler h) {
  on_event_ = std::move(h);
}
void endpoint::set_fenced_handler(fenced_handler h) {
  on_fenced_ = std::move(h);
}

namespace {
// The messages that say which incarnation speaks, or that membership handles itself.
bool is_membership_message(const envelope& message) {
  return message.is<heartbeat>() || message.is<member_join>() || message.is<member_leave>() ||
         message.is<member_directory>() || message.is<member_fenced>();
}
} // namespace

bool endpoint::refuse_if_fenced(const peer_id& from, const envelope& message) {
  // Any other message of a fenced member may be its restarted process's first, ahead of that
  // one's heartbeat: on_message holds it until a heartbeat or join tells which process it is.
  if (!is_membership_message(message)) return false;
  uint64_t incarnation = 0;
  {
    std::lock_guard lock(mutex_);
    const member* m = membership_.find(from);
    if (!m || !m->fenced) return false;
    incarnation = m->incarnation;
  }
  // A restarted process speaks with a new incarnation: that one is welcome.
  if (auto* h = message.get<heartbeat>(); h && h->incarnation > incarnation) return false;
  if (auto* j = message.get<member_join>(); j && j->incarnation > incarnation) return false;
  reject(from, "fenced_incarnation",
         "a message of incarnation " + std::to_string(incarnation) +
             ", declared down after missing its heartbeats");
  if (message.is<heartbeat>()) { // at the sender's heartbeat pace, no faster
    drop_held(from, "fenced_incarnation",
              "a message held for its sender's next heartbeat, which came from the incarnation " +
                  std::to_string(incarnation) + " declared down after missing its heartbeats");
    control_plane().send(
        from, make_envelope(member_fenced{from, incarnation,
                                          "declared down by " + self_.name + " after a hang"}));
  }
  return true;
}

void endpoint::on_fenced_notice(const peer_id& from, const member_fenced& notice) {
  if (notice.peer != self_.name || notice.incarnation != incarnation_) return; // not about us
  if (fenced_.exchange(true)) return;
  log_.error("fenced by {}: {}; this incarnation is refused everywhere, so it stops and comes "
             "back as a new one",
             from, notice.reason);
  if (on_fenced_) on_fenced_(from, notice.reason);
}

void endpoint::set_join_seeds(std::vector<join_seed> seeds) {
  join_seeds_ = std::move(seeds);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  for (auto& seed : join_seeds_) {
    if (seed.control_address.empty()) continue; // a config instance: known already
    member_join j{seed.peer, "", 0, {}};
    for (auto& [name, p] : planes_) {
      j.endpoints[name] = seed.control_address;
      p->add_peer(seed.peer, seed.control_address, seed.control_address);
    }
    membership_.on_join(j, now);
  }
}

void endpoint::start() {
  for (auto& [name, p] : planes_) p->start();
  if (self_.joined) rejoin_tick();
}

std::map<std::string, member> endpoint::members() const {
  std::lock_guard lock(mutex_);
  return membership_.members();
}

void endpoint::stop() {
  retry_.stop();
  for (auto& [name, p] : planes_) p->stop();
}

bool endpoint::is_alive(const peer_id& peer) const {
  std::lock_guard lock(mutex_);
  return membership_.is_alive(peer);
}

std::optional<uint64_t> endpoint::live_incarnation(const peer_id& peer) const {
  std::lock_guard lock(mutex_);
  const member* m = membership_.find(peer);
  if (!m || m->state != member_state::alive) return std::nullopt;
  return m->incarnation;
}

const plane* endpoint::plane_named(const std::string& name) const {
  auto it = planes_.find(name);
  return it == planes_.end() ? nullptr : it->second.get();
}

send_status endpoint::send(const std::string& flow, const peer_id& to, const envelope& message) {
  {
    std::lock_guard lock(mutex_);
    const member* m = membership_.find(to);
    if (!m) return send_status::unknown_peer;
    if (m->state != member_state::alive) return send_status::peer_down;
  }
  return send_to_member(flow, to, message);
}

send_status endpoint::send_to_member(const std::string& flow, const peer_id& to,
                                     const envelope& message) {
  plane& p = *planes_.at(cluster_.plane_for_flow(flow).name);
  if (faults_)
    return faults_->send(flow, message, [&p, to](const envelope& m) { return p.send(to, m); });
  return p.send(to, message);
}

send_status endpoint::send_retrying(const std::string& flow, const peer_id& to,
                                    const envelope& message, std::chrono::milliseconds deadline) {
  return retry_.send(flow, to, message, deadline);
}

namespace {
std::string type_name_of(uint16_t type) {
  const auto* info = message_registry::instance().find(type);
  return info ? info->name : "type " + std::to_string(type);
}
} // namespace

void endpoint::count_unexpected(const peer_id& from, uint16_t type, const std::string& role) {
  // A peer can flood these: only a counter moves per frame; the name is looked up once.
  bool first = false;
  {
    std::lock_guard lock(refused_mutex_);
    first = unexpected_[type]++ == 0;
  }
  if (first)
    log_.warn("unexpected message {} (type {}) from {}: not in the {} role's interface; counted "
              "in supernode_unexpected_messages_total, not logged again",
              type_name_of(type), type, from, role);
}

std::map<std::string, uint64_t> endpoint::unexpected_messages() const {
  std::lock_guard lock(refused_mutex_);
  std::map<std::string, uint64_t> by_name;
  for (auto& [type, n] : unexpected_) by_name[type_name_of(type)] += n;
  return by_name;
}

void endpoint::reject(const peer_id& from, const std::string& reason, const std::string& detail) {
  {
    std::lock_guard lock(refused_mutex_);
    ++rejected_[reason];
  }
  log_.limited(rejected_lines_, log::level::warn, reason,
               "rejected a message from {}: {} ({}); counted in "
               "supernode_rejected_messages_total{{reason=\"{}\"}}",
               from, detail, reason, reason);
}

std::map<std::string, uint64_t> endpoint::rejected_messages() const {
  std::map<std::string, uint64_t> out;
  {
    std::lock_guard lock(refused_mutex_);
    out = rejected_;
  }
  for (auto& [name, p] : planes_) {
    const auto& c = p->counters();
    if (const auto n = c.handshakes_refused.load()) out["handshake_refused"] += n;
    if (const auto n = c.identity_mismatch.load()) out["identity_mismatch"] += n;
  }
  return out;
}

std::string endpoint::role_of(const peer_id& peer) const {
  std::lock_guard lock(mutex_);
  const member* m = membership_.find(peer);
  return m ? m->role : std::string();
}

bool endpoint::expect_role(const peer_id& from, const std::string& role, const char* what) {
  if (role_of(from) == role) return true;
  reject(from, "not_from_" + role, std::string(what) + " is only taken from a " + role);
  return false;
}

const instance_config* endpoint::config_instance(const std::string& name) const {
  for (auto& inst : cluster_.instances())
    if (inst.name == name && !inst.joined) return &inst;
  return nullptr;
}

std::string endpoint::join_refusal(const member_join& j) const {
  if (const auto* inst = config_instance(j.peer))
    return inst->role == j.role ? "" : "join_with_another_role";
  const auto prefix = j.role + "-";
  const bool named_for_role =
      !j.role.empty() && j.peer.size() > prefix.size() && j.peer.starts_with(prefix) &&
      std::all_of(j.peer.begin() + static_cast<std::ptrdiff_t>(prefix.size()), j.peer.end(),
                  [](unsigned char c) { return std::isdigit(c) != 0; });
  return named_for_role ? "" : "join_with_another_role";
}

// Membership messages speak for their sender only: a heartbeat, join or leave naming another
// member, or a leave of an earlier process of this one, is refused. Returns the refusal reason.
std::string endpoint::membership_refusal(const peer_id& from, const envelope& message) const {
  if (auto* h = message.get<heartbeat>()) return h->sender == from ? "" : "heartbeat_for_another";
  if (auto* j = message.get<member_join>())
    return j->peer != from ? "join_for_another" : join_refusal(*j);
  if (auto* l = message.get<member_leave>()) {
    if (l->peer != from) return "leave_for_another";
    std::lock_guard lock(mutex_);
    const member* m = membership_.find(from);
    if (m && m->incarnation != 0 && l->incarnation != m->incarnation) return "stale_incarnation";
  }
  return "";
}

void endpoint::on_message(const peer_id& from, envelope message) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<membership_event> events;
  if (auto* notice = message.get<member_fenced>()) return on_fenced_notice(from, *notice);
  if (refuse_if_fenced(from, message)) return;
  if (message.is<heartbeat>() || message.is<member_join>() || message.is<member_leave>()) {
    if (const auto refusal = membership_refusal(from, message); !refusal.empty()) {
      reject(from, refusal,
             std::string(message_registry::instance().find(message.type())->name) +
                 " speaking for another member or process");
      return;
    }
  }
  // Before connect_announced, which may replace the links a drop left down.
  const bool links_up = links_up_to(from);
  if (auto* h = message.get<heartbeat>()) {
    std::lock_guard lock(mutex_);
    events = membership_.on_heartbeat(*h, now, links_up);
  } else if (auto* j = message.get<member_join>()) {
    connect_announced(*j);
    member_directory directory;
    {
      std::lock_guard lock(mutex_);
      events = membership_.on_join(*j, now, links_up);
      if (j->wants_directory)
        for (auto& [id, m] : membership_.members()) {
          if (id == j->peer) continue;
          if (m.state == member_state::alive)
            directory.members.push_back({id, m.role, m.incarnation, m.endpoints});
          else if (m.state == member_state::left)
            directory.left.push_back({id, "it left the cluster", m.incarnation});
        }
    }
    if (j->wants_directory) {
      directory.members.push_back(own_join(false));
      send("control", j->peer, make_envelope(std::move(directory)));
    }
  } else if (auto* d = message.get<member_directory>()) {
    on_directory(from, *d);
    return;
  } else if (auto* l = message.get<member_leave>()) {
    std::lock_guard lock(mutex_);
    events = membership_.on_leave(*l, now);
  } else {
    hold_outcome held = hold_outcome::not_held;
    {
      std::lock_guard lock(mutex_);
      held = hold_if_unconfirmed(from, message, now, links_up);
      if (held == hold_outcome::not_held) events = membership_.on_message(from, now, links_up);
    }
    if (held == hold_outcome::overflow)
      reject(from, "held_overflow",
             "more than " + std::to_string(max_held_per_peer) +
                 " messages waiting for their sender's next heartbeat");
    if (held != hold_outcome::not_held) return;
    emit(events);
    deliver(from, std::move(message));
    return;
  }
  emit(events);
}

void endpoint::deliver(const peer_id& from, envelope message) {
  // A reply nobody waits for any more (expired, failed) is dropped; one with reply_to 0 was
  // pushed, not asked for, and goes to the role like any message.
  const auto* info = message_registry::instance().find(message.type());
  if (info && info->reply_to) {
    if (const uint64_t id = info->reply_to(message.object().get()); id != 0) {
      if (pending_.complete(id, from, std::move(message)) ==
          pending_requests::reply_outcome::wrong_sender)
        reject(from, "reply_from_another",
               std::string(info->name) + " answering a request asked of another peer");
      return;
    }
  }
  if (on_message_) on_message_(from, std::move(message));
}

endpoint::hold_outcome endpoint::hold_if_unconfirmed(const peer_id& from, envelope& message,
                                                     steady_time now, bool links_up) {
  auto it = held_.find(from);
  if (it == held_.end()) {
    if (!membership_.sender_unconfirmed(from, links_up)) return hold_outcome::not_held;
    it = held_.try_emplace(from).first;
  }
  auto& queue = it->second;
  if (queue.messages.size() >= max_held_per_peer) return hold_outcome::overflow;
  if (queue.messages.empty()) queue.since = now;
  queue.messages.push_back(std::move(message));
  return hold_outcome::held;
}

size_t endpoint::messages_held() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (auto& [peer, queue] : held_) n += queue.messages.size();
  return n;
}

void endpoint::release_held(const peer_id& peer) {
  std::deque<envelope> batch;
  {
    std::lock_guard lock(mutex_);
    auto it = held_.find(peer);
    if (it == held_.end() || it->second.releasing || !membership_.is_alive(peer)) return;
    it->second.releasing = true;
    batch.swap(it->second.messages);
  }
  for (;;) {
    for (auto& message : batch) deliver(peer, std::move(message));
    batch.clear();
    std::lock_guard lock(mutex_);
    auto it = held_.find(peer);
    if (it->second.messages.empty()) {
      held_.erase(it);
      return;
    }
    batch.swap(it->second.messages);
  }
}

void endpoint::drop_held(const peer_id& peer, const std::string& reason,
                         const std::string& detail) {
  size_t dropped = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = held_.find(peer);
    if (it == held_.end() || it->second.releasing) return;
    dropped = it->second.messages.size();
    held_.erase(it);
  }
  for (size_t i = 0; i < dropped; ++i) reject(peer, reason, detail);
}

void endpoint::expire_held(steady_time now) {
  const auto bound = cluster_.liveness_bound();
  std::vector<peer_id> expired;
  {
    std::lock_guard lock(mutex_);
    for (auto& [peer, queue] : held_)
      if (!queue.releasing && now - queue.since > bound) expired.push_back(peer);
  }
  for (auto& peer : expired)
    drop_held(
        peer, "unconfirmed_sender",
        "a message held for its sender's next heartbeat, which did not come within " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(bound).count()) +
            " ms");
}

void endpoint::emit(const std::vector<membership_event>& events) {
  for (auto& e : events) {
    log_membership(e);
    if (e.what != membership_event::kind::joined) pending_.fail_peer(e.peer, e.reason);
    // A member that (re)appears knows this joined instance only if told: a restarted config
    // member starts from the config, which does not list it.
    if (e.what == membership_event::kind::joined && self_.joined) announce_join(e.peer);
    if (on_event_) on_event_(e);
    // After the role heard that it joined: what it sent ahead of its heartbeat.
    if (e.what == membership_event::kind::joined) release_held(e.peer);
  }
}

void endpoint::on_directory(const peer_id& from, const member_directory& d) {
  if (!self_.joined)
    return reject(from, "unasked_directory", "a member_directory nobody asked for");
  const auto now = std::chrono::steady_clock::now();
  std::vector<membership_event> events;
  std::vector<std::string> to_announce;
  for (auto& entry : d.members) {
    if (entry.peer == self_.name) continue;
    if (!join_refusal(entry).empty()) {
      reject(from, "join_with_another_role",
             "a directory entry naming " + entry.peer + " as a " + entry.role);
      continue;
    }
    {
      std::lock_guard lock(mutex_);
      const member* known = membership_.find(entry.peer);
      // What we heard from a member itself outranks what another says of it (incarnation 0:
      // a config member or a seed not heard from yet).
      if (known && known->state == member_state::alive && known->incarnation != 0 &&
          known->incarnation >= entry.incarnation)
        continue;
    }
    const bool links_up = links_up_to(entry.peer);
    connect_announced(entry);
    std::lock_guard lock(mutex_);
    auto e = membership_.on_join(entry, now, links_up);
    // A member new to this endpoint hears of it through emit() (its joined event); one adopted
    // quietly (a config member not heard from yet) is told here.
    if (e.empty()) to_announce.push_back(entry.peer);
    events.insert(events.end(), e.begin(), e.end());
  }
  {
    std::lock_guard lock(mutex_);
    for (auto& leave : d.left) {
      if (leave.peer == self_.name) continue;
      auto e = membership_.on_reported_leave(
          {leave.peer, from + "'s directory: " + leave.reason, leave.incarnation}, now);
      events.insert(events.end(), e.begin(), e.end());
    }
  }
  directory_received_ = true;
  emit(events);
  for (auto& peer : to_announce) announce_join(peer);
}

plane& endpoint::control_plane() const {
  return *planes_.at(cluster_.plane_for_flow("control").name);
}

bool endpoint::links_up_to(const peer_id& peer) const {
  for (auto& [name, p] : planes_)
    if (p->link_down(peer)) return false;
  return true;
}

void endpoint::connect_announced(const member_join& j) {
  // Config instances were connected at their config addresses when the planes were made.
  if (config_instance(j.peer)) return;
  {
    // A repeated join (same process, same addresses) keeps its connections: reconnecting would
    // break handshakes in flight.
    std::lock_guard lock(mutex_);
    const member* known = membership_.find(j.peer);
    if (known && known->state == member_state::alive && known->incarnation == j.incarnation &&
        known->endpoints == j.endpoints)
      return;
  }
  for (auto& [name, p] : planes_) {
    auto control = j.endpoints.find(name), bulk = j.endpoints.find(name + ".bulk");
    if (control != j.endpoints.end())
      p->add_peer(j.peer, control->second,
                  bulk != j.endpoints.end() ? bulk->second : control->second);
  }
}

member_join endpoint::own_join(bool wants_directory) const {
  member_join j{self_.name, self_.role, incarnation_, {}, wants_directory};
  for (auto& [name, pc] : cluster_.planes) {
    const auto& p = *planes_.at(name);
    const auto control = p.bound_address("control"), bulk = p.bound_address("bulk");
    j.endpoints[name] = control.empty() ? cluster_.address(self_, pc, "control") : control;
    j.endpoints[name + ".bulk"] = bulk.empty() ? cluster_.address(self_, pc, "bulk") : bulk;
  }
  return j;
}

void endpoint::rejoin_tick() {
  if (!self_.joined) return;
  auto& control = control_plane();
  if (!directory_received_) {
    const auto join = make_envelope(own_join(true));
    for (auto& seed : join_seeds_) control.send(seed.peer, join);
    return;
  }
  if (ticks_ % 10 != 0) return; // once a second at the default heartbeat: down peers wait
  // A config member that is down, or that left, may come back as a new process under its name
  // (restarted, or scaled up again) knowing only the config: it hears of this instance only
  // from here, and this instance of it only once it has.
  std::vector<std::string> may_not_know_us;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, m] : membership_.members())
      if (m.state == member_state::down ||
          (m.state == member_state::left && config_instance(id) != nullptr))
        may_not_know_us.push_back(id);
  }
  const auto join = make_envelope(own_join(false));
  for (auto& peer : may_not_know_us) control.send(peer, join);
}

void endpoint::log_membership(const membership_event& e) {
  using kind = membership_event::kind;
  const char* what = e.what == kind::joined ? "joined" : e.what == kind::left ? "left" : "is down";
  // Per peer and kind: a peer that restarts in a loop costs a line a second, not a line a start.
  log_.limited(membership_lines_, e.what == kind::down ? log::level::warn : log::level::info,
               std::string(what) + " " + e.peer, "member {} {}: {}", e.peer, what, e.reason);
}

void endpoint::tick(steady_time now) {
  std::vector<std::string> targets;
  std::vector<membership_event> events;
  std::chrono::nanoseconds paused{0};
  {
    std::lock_guard lock(mutex_);
    events = membership_.tick(now, control_plane().read_up_to(now));
    paused = membership_.last_pause();
    for (auto& [id, m] : membership_.members())
      // Members that are down too (not those that left): two live processes that each saw
      // the other's connection drop (a stall past ZeroMQ's heartbeat timeout) would otherwise
      // wait for each other's heartbeat for ever. A fenced one learns it from its answer.
      if (id != self_.name && m.state != member_state::left) targets.push_back(id);
  }
  ++ticks_;
  rejoin_tick();
  if (paused.count() > 0)
    log_.warn("this process did not run for {} ms (stopped or stalled): its peers' silence is its "
              "own, so none is declared down for it",
              std::chrono::duration_cast<std::chrono::milliseconds>(paused).count());
  emit(events);
  pending_.expire(now);
  expire_held(now);
  auto hb = make_envelope(heartbeat{self_.name, incarnation_, ++heartbeat_seq_});
  for (auto& t : targets)
    send_to_member("control", t, hb); // a full queue drops one; the next follows soon
}

void endpoint::announce_join(const peer_id& peer, bool wants_directory) {
  control_plane().send(peer, make_envelope(own_join(wants_directory)));
}

void endpoint::announce_leave(const std::string& reason) {
  auto msg = make_envelope(member_leave{self_.name, reason, incarnation_});
  std::vector<std::string> peers;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, m] : membership_.members())
      if (id != self_.name) peers.push_back(id);
  }
  for (auto& peer : peers) send("control", peer, msg);
}

} // namespace supernode::transport
