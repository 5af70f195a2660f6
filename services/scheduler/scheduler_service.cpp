#include "services/scheduler/scheduler_service.hpp"

#include "services/scheduler/placement.hpp"
#include "services/serving/delivery.hpp"

namespace supernode::services {

using protocol::request_key;

scheduler_service::scheduler_service(const serving_config& config,
                                     const transport::cluster_config& cluster)
    : config_(config), liveness_window_(cluster.liveness_bound()) {
  protocol::register_serving_messages();
  for (auto& p : instances_with_role(cluster, "prefill")) prefills_[p];
  for (auto& d : instances_with_role(cluster, "decode")) decodes_[d];
  colocated_ = prefills_.empty();
}

void scheduler_service::on(const transport::peer_id& from, const protocol::decode_assign_result& r,
                           transport::endpoint& out) {
  auto it = placed_.find(r.key);
  if (it == placed_.end()) return;
  if (it->second.decode != from)
    return out.reject(from, "not_from_placed_decode",
                      "decode_assign_result for a request placed on " + it->second.decode);
  if (r.accepted()) {
    it->second.request = {}; // no longer needed
    it->second.accepted = true;
    return;
  }
  decodes_[from].refused = true;
  unplace(r.key, true);
  place_queued(out);
}

void scheduler_service::on(const transport::peer_id& from, const protocol::load_report& l,
                           transport::endpoint& out) {
  if (const auto role = out.role_of(from); l.role != role)
    return out.reject(from, "role_mismatch",
                      "load_report as a " + l.role + " from a member whose role is " +
                          (role.empty() ? "unknown" : role));
  // A report that comes after its sender left or went down is of a process that is gone: its
  // totals would become the baseline of the instance's next process.
  if (!out.is_alive(from)) return;
  if (l.role == "decode") {
    auto& d = decodes_[from];
    // A scheduler that (re)started meets instances already holding KV: what they report in
    // use is its baseline, so the view is exact without any state surviving the restart.
    if (!d.reported) d.reserved = l.kv_blocks_released + l.kv_blocks_used;
    d.reported = true;
    d.refused = false;
    d.last = l;
    for (auto& k : l.finished) placed_.erase(k);
    d.last.finished.clear(); // consumed
  } else if (l.role == "prefill") {
    auto& p = prefills_[from];
    if (!p.reported) p.assigned_tokens += l.prompt_tokens_completed; // baseline, as for decode
    p.reported = true;
    p.completed_tokens = l.prompt_tokens_completed;
    p.last = l;
  } else if (l.role == "expert_shard" || l.role == "mp_server" || l.role == "mp_controller") {
    reporters_[from].last = l;
  }
  place_queued(out);
}

void scheduler_service::on(const transport::peer_id& from, const protocol::cancel_request& c,
                           transport::endpoint& out) {
  if (from != c.key.gateway)
    return out.reject(from, "not_from_request_gateway",
                      "cancel_request for a request of " + c.key.gateway);
  for (auto it = queue_.begin(); it != queue_.end(); ++it)
    if (it->key == c.key) {
      queue_.erase(it);
      return;
    }
  // Placed already: the decode instance owns it now (the gateway may not know where yet).
  if (auto it = placed_.find(c.key); it != placed_.end())
    out.send("control", it->second.decode, transport::make_envelope(c));
}

void scheduler_service::on(const transport::peer_id& from, const protocol::admit_request& a,
                           transport::endpoint& out) {
  // The key names the gateway the tokens go to: only that gateway may admit under it.
  if (from != a.key.gateway)
    return out.reject(from, "not_from_request_gateway",
                      "admit_request under the key of " + a.key.gateway);
  if (!out.expect_role(from, "gateway", "admit_request")) return;
  if (static_cast<int64_t>(queue_.size()) >= config_.max_queued) {
    out.send("control", a.key.gateway,
             transport::make_envelope(protocol::admit_rejected{
                 a.key,
                 {protocol::serving_errc::queue_full,
                  "scheduler queue full (" + std::to_string(queue_.size()) + " waiting)"}}));
    return;
  }
  queue_.push_back(a);
  place_queued(out);
}

void scheduler_service::place_queued(transport::endpoint& out) {
  while (!queue_.empty()) {
    const auto& a = queue_.front();
    const int64_t tokens = static_cast<int64_t>(a.spec.prompt.size());
    const int64_t blocks =
        (tokens + a.spec.max_tokens + config_.block_size - 1) / config_.block_size;

    std::vector<decode_load> decode_candidates;
    bool any_could_fit = false, all_reported = true, decode_alive = false;
    std::string unavailable; // why a live decode instance takes nothing
    bool decode_may_return = false;
    const auto now = std::chrono::steady_clock::now();
    for (auto& [name, d] : decodes_) {
      if (!d.alive) {
        decode_may_return |= d.down_since && now - *d.down_since < liveness_window_;
        continue;
      }
      if (!d.last.unavailable.ok()) {
        unavailable = name + ": " + d.last.unavailable.message;
        continue;
      }
      decode_alive = true;
      all_reported &= d.reported;
      any_could_fit |= d.reported && d.capacity() >= blocks;
      if (d.reported && !d.refused)
        decode_candidates.push_back({name, d.free_blocks(), d.last.running, true, false});
    }
    bool prefill_alive = colocated_;
    std::string prefill_unavailable;
    for (auto& [name, p] : prefills_) {
      if (p.alive && !p.last.unavailable.ok()) {
        prefill_unavailable = name + ": " + p.last.unavailable.message;
        continue;
      }
      prefill_alive |= p.alive;
    }
    // Nobody left to serve it (instances dead, none joined since): answer now, not never.
    using protocol::serving_errc;
    protocol::error refusal;
    if (!decode_alive && decode_may_return && unavailable.empty())
      return; // waits (on_tick places again) for a decode instance that dropped a moment ago
    if (!decode_alive)
      refusal = {serving_errc::no_decode_instance,
                 unavailable.empty() ? "no decode instance is alive"
                                     : "no decode instance is serving (" + unavailable + ")"};
    else if (!prefill_alive)
      refusal = {serving_errc::no_prefill_instance,
                 prefill_unavailable.empty()
                     ? "no prefill instance is alive"
                     : "no prefill instance is serving (" + prefill_unavailable + ")"};
    else if (all_reported && !any_could_fit)
      refusal = {serving_errc::kv_capacity_exceeded,
                 "request needs " + std::to_string(blocks) +
                     " KV blocks, more than any decode instance holds"};
    if (!refusal.ok()) {
      out.send("control", a.key.gateway,
               transport::make_envelope(protocol::admit_rejected{a.key, refusal}));
      queue_.pop_front();
      continue;
    }
    auto decode = pick_decode(decode_candidates, blocks);
    if (!decode) return; // waits for KV to free up (or an instance to report)
    // A sequence moving off a draining decode instance gets its KV from there, if that instance
    // still lives; otherwise its prompt is prefilled (and its tokens recomputed) as usual.
    const auto holder = decodes_.find(a.moved.instance);
    const bool moves = !a.moved.empty() && holder != decodes_.end() && holder->second.alive &&
                       *decode != a.moved.instance;
    std::string prefill;
    if (moves) {
      prefill = a.moved.instance;
    } else if (!colocated_) {
      std::vector<prefill_load> prefill_candidates;
      for (auto& [name, p] : prefills_)
        prefill_candidates.push_back({name, p.assigned_tokens - p.completed_tokens,
                                      p.alive && p.last.unavailable.ok(), false});
      auto chosen = pick_prefill(prefill_candidates);
      if (!chosen) return; // no prefill instance alive: wait for one
      prefill = *chosen;
    }

    protocol::decode_assign assign{a.key, a.spec, prefill, blocks, {}};
    if (moves) assign.moved = a.moved;
    if (out.send("control", *decode, transport::make_envelope(assign)) !=
        transport::send_status::ok) {
      decodes_[*decode].refused = true;
      continue;
    }
    decodes_[*decode].reserved += blocks;
    if (!prefill.empty() && !moves) prefills_[prefill].assigned_tokens += tokens;
    out.send("control", a.key.gateway,
             transport::make_envelope(protocol::request_placed{a.key, prefill, *decode}));
    placed_[a.key] = placement{
        moves ? "" : prefill, *decode, blocks, tokens, a, std::chrono::steady_clock::now()};
    queue_.pop_front();
  }
}

void scheduler_service::unplace(const request_key& key, bool requeue) {
  auto it = placed_.find(key);
  if (it == placed_.end()) return;
  auto& p = it->second;
  decodes_[p.decode].reserved -= p.blocks;
  if (!p.prefill.empty()) prefills_[p.prefill].assigned_tokens -= p.prompt_tokens;
  if (requeue) queue_.push_front(std::move(p.request));
  placed_.erase(it);
}

void scheduler_service::on_member_event(const transport::membership_event& event,
                                        transport::endpoint& out) {
  const bool alive = event.what == transport::membership_event::kind::joined;
  if (auto it = prefills_.find(event.peer); it != prefills_.end()) {
    // A new incarnation counts its completed tokens from zero: so does its state here. Its
    // placed requests are the decode instances' to drop (they watch the same membership).
    if (!alive) it->second = prefill_state{};
    it->second.alive = alive;
  }
  if (auto it = reporters_.find(event.peer); it != reporters_.end()) it->second.alive = alive;
  if (auto it = decodes_.find(event.peer); it != decodes_.end()) {
    auto& d = it->second;
    d.alive = alive;
    if (!alive) {
      // Its requests end at the gateway (which watches the same membership); forget them.
      for (auto p = placed_.begin(); p != placed_.end();)
        p = p->second.decode == event.peer ? placed_.erase(p) : std::next(p);
      d = decode_state{};
      d.alive = false;
      if (event.what == transport::membership_event::kind::down)
        d.down_since = std::chrono::steady_clock::now();
    }
  }
  if (!alive) {
    // A gateway gone: its queued requests have nobody to answer.
    for (auto q = queue_.begin(); q != queue_.end();)
      q = q->key.gateway == event.peer ? queue_.erase(q) : std::next(q);
  }
  place_queued(out);
}

void scheduler_service::take_back_unanswered(transport::endpoint& out) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<request_key> unanswered;
  for (auto& [key, p] : placed_)
    if (!p.accepted && now - p.at > assign_timeout()) unanswered.push_back(key);
  for (auto& key : unanswered) {
    const auto decode = placed_.at(key).decode;
    // Should it arrive after all, the instance drops it instead of running it twice.
    out.send("control", decode,
             transport::make_envelope(protocol::cancel_request{
                 key, {protocol::serving_errc::delivery_failed, "assignment unanswered"}}));
    out.log().warn("{} did not answer the assignment of {} in {} ms: placing it again", decode,
                   key.str(), assign_timeout().count());
    decodes_[decode].refused = true; // until its next report
    unplace(key, true);
  }
}

void scheduler_service::on_tick(transport::endpoint& out) {
  take_back_unanswered(out);
  place_queued(out);
  protocol::cluster_stats stats;
  stats.queued = static_cast<int64_t>(queue_.size());
  auto add = [&](const std::string& name, const char* role, bool alive,
                 const protocol::load_report& last) -> protocol::instance_stats& {
    protocol::instance_stats s;
    s.name = name;
    s.role = role;
    s.alive = alive;
    s.running = last.running;
    s.waiting = last.waiting;
    s.unavailable = last.unavailable;
    s.ep_stage_seconds = last.ep_stage_seconds;
    s.ep_forwards = last.ep_forwards;
    s.cache = last.cache;
    s.unexpected_messages = last.unexpected_messages;
    s.rejected_messages = last.rejected_messages;
    s.sequences_moved_in = last.sequences_moved_in;
    s.sequences_moved_out = last.sequences_moved_out;
    s.mtp_drafted = last.mtp_drafted;
    s.mtp_accepted = last.mtp_accepted;
    s.mtp_drafting_steps = last.mtp_drafting_steps;
    s.mtp_depth = last.mtp_depth;
    for (auto& t : last.planes) stats.planes.emplace_back(name, t);
    stats.instances.push_back(s);
    return stats.instances.back();
  };
  for (auto& [name, p] : prefills_)
    add(name, "prefill", p.alive, p.last).outstanding_prompt_tokens =
        p.assigned_tokens - p.completed_tokens;
  for (auto& [name, r] : reporters_) add(name, r.last.role.c_str(), r.alive, r.last);
  for (auto& [name, d] : decodes_) {
    auto& s = add(name, "decode", d.alive, d.last);
    s.kv_blocks_total = d.capacity();
    s.kv_blocks_used = d.used_blocks();
  }
  stats.scheduler = out.self();
  stats.scheduler_unexpected = out.unexpected_messages();
  stats.scheduler_rejected = out.rejected_messages();
  for (auto& t : plane_traffic_of(out)) stats.planes.emplace_back(out.self(), t);
  auto message = transport::make_envelope(std::move(stats));
  for (auto& g : instances_with_role(out.cluster(), "gateway")) out.send("control", g, message);
}

} // namespace supernode::services
