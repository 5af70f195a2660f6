#include "services/ems/mp_controller.hpp"

#include "services/ems/model_blocks.hpp"
#include "services/protocol/ems_messages.hpp"
#include "services/serving/delivery.hpp"

#include <algorithm>

namespace supernode::services::ems {

namespace pr = protocol;

mp_controller::mp_controller(const transport::cluster_config& cluster, const ems_config& config)
    : config_(config), ring_(config.vnodes) {
  pr::register_ems_messages();
  pr::register_serving_messages(); // its load reports
  epoch_ = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count())
           << 16;
  // A server goes on the ring when it first asks for it (it is up and its tier is rebuilt), not
  // when the config names it: processes start in any order, and a ring naming a server that is
  // still starting would send puts nowhere.
  for (auto& s : instances_with_role(cluster, "mp_server")) configured_servers_.insert(s);
  // The roles that hold a pool client and take ring pushes: a restarted controller reaches them
  // before they ask (they keep the ring they have and ask only when they have none).
  for (const char* role : {"prefill", "decode"})
    for (auto& i : instances_with_role(cluster, role)) subscribers_.insert(i);
}

void mp_controller::start(transport::endpoint& out) {
  out.log().info("{}", ring_.describe());
  push_ring(out);
}

pr::ems_ring_view mp_controller::ring_view() const {
  pr::ems_ring_view v;
  v.version = epoch_ + ring_version_;
  v.vnodes = ring_.vnodes_per_server();
  v.servers = ring_.servers();
  v.incarnation = epoch_;
  // The model namespace is bounded by whole-model eviction here, not by per-server quotas
  // (a server refusing one block of a model would leave the model half stored).
  const uint64_t n = std::max<uint64_t>(1, ring_.size());
  for (auto& [ns, bytes] : config_.quotas)
    if (ns != config_.model_namespace) v.quotas.emplace_back(ns, bytes / n);
  return v;
}

std::optional<std::vector<std::string>> mp_controller::target_servers() const {
  if (!change_) return std::nullopt;
  return change_->target.servers();
}

void mp_controller::push_ring(transport::endpoint& out) {
  const auto v = ring_view();
  auto message = transport::make_envelope(v);
  std::set<transport::peer_id> targets;
  if (settled_) targets = subscribers_;
  targets.insert(v.servers.begin(), v.servers.end());
  // A server on its way off the ring learns from this push that it is off.
  if (change_) targets.insert(change_->waiting.begin(), change_->waiting.end());
  targets.insert(departing_.begin(), departing_.end());
  for (auto& t : targets) out.send("ems", t, message); // a lost push is re-asked on a miss
}

bool mp_controller::is_server(const transport::peer_id& peer, transport::endpoint& out) const {
  // Servers named in the config, and those that joined since (free-form, `role ems --join`).
  return configured_servers_.count(peer) != 0 || ring_.contains(peer) ||
         out.role_of(peer) == "mp_server";
}

void mp_controller::on_member_event(const transport::membership_event& event,
                                    transport::endpoint& out) {
  const bool up = event.what == transport::membership_event::kind::joined;
  if (is_server(event.peer, out)) {
    if (up) {
      server_up(event.peer, "joined (" + event.reason + ")", out);
      return;
    }
    // Gone without handing anything over: its blocks are lost to the cache.
    joining_.erase(event.peer);
    leaving_.erase(event.peer);
    departing_.erase(event.peer);
    usage_.erase(event.peer);
    const bool was_on_ring = ring_.contains(event.peer);
    if (was_on_ring) {
      ring_.remove_server(event.peer);
      ring_version_ = ++version_;
      out.log().info("{} left the ring ({}): {}", event.peer, event.reason, ring_.describe());
      push_ring(out);
    }
    if (change_) {
      change_->waiting.erase(event.peer);
      const bool in_target = change_->target.contains(event.peer);
      if (in_target) change_->target.remove_server(event.peer);
      if (in_target || was_on_ring) {
        // Either ring of the change lost a server: the servers plan again against the new pair,
        // under a version above the ring just pushed.
        if (change_->target.servers() == ring_.servers() || ring_.size() == 0 ||
            change_->target.size() == 0)
          finish_change(out, false); // nothing left to hand over, or nobody to hand it to
        else
          plan_again(out);
      } else if (change_->waiting.empty() && change_->retry_in_ticks == 0) {
        round_done(out);
      }
    }
  }
  if (up) return;
  subscribers_.erase(event.peer);
  // A fetcher that died will never register its model: the next waiter fetches instead.
  std::vector<std::string> orphaned;
  for (auto& [key, m] : models_)
    if (!m.ready && m.fetcher == event.peer) orphaned.push_back(key);
  for (auto& key : orphaned) pass_claim(out, key);
}

void mp_controller::add_server(const transport::peer_id& server, const std::string& why,
                               transport::endpoint& out) {
  ring_.add_server(server);
  ring_version_ = ++version_;
  out.log().info("{} {}: {}", server, why, ring_.describe());
  push_ring(out);
  settle(out);
}

void mp_controller::server_up(const transport::peer_id& server, const std::string& why,
                              transport::endpoint& out) {
  if (ring_.contains(server) || joining_.count(server) || departing_.count(server) ||
      (change_ && change_->target.contains(server)))
    return;
  // While the pool starts (and when no server is left) there is nothing to hand over.
  if (!settled_ || ring_.size() == 0) return add_server(server, why, out);
  joining_.insert(server);
  out.log().info("{} {}: it joins the ring once the blocks it will own are handed over", server,
                 why);
}

void mp_controller::begin_change(transport::endpoint& out) {
  if (change_ || (joining_.empty() && leaving_.empty())) return;
  hash_ring target = ring_;
  for (auto& s : joining_)
    if (!target.contains(s)) target.add_server(s);
  for (auto& s : leaving_)
    if (target.contains(s)) target.remove_server(s);
  joining_.clear();
  leaving_.clear();
  if (target.servers() == ring_.servers()) return;
  ring_change c;
  c.version = ++version_;
  c.started = std::chrono::steady_clock::now();
  for (auto& s : ring_.servers()) c.waiting.insert(s);
  for (auto& s : target.servers()) c.waiting.insert(s);
  c.target = std::move(target);
  change_ = std::move(c);
  out.log().info("ring change to version {}: {} -> {}: the servers hand their blocks over",
                 epoch_ + change_->version, ring_.describe(), change_->target.describe());
  if (ring_.size() == 0 || change_->target.size() == 0)
    return finish_change(out, false); // nobody to hand over from, or to
  send_target(out);
}

void mp_controller::send_target(transport::endpoint& out) {
  pr::ems_ring_target t;
  t.version = epoch_ + change_->version;
  t.vnodes = ring_.vnodes_per_server();
  t.copies = config_.replicas;
  t.current_servers = ring_.servers();
  t.servers = change_->target.servers();
  const auto message = transport::make_envelope(std::move(t));
  for (auto& s : change_->waiting) out.send_retrying("ems", s, message);
}

void mp_controller::plan_again(transport::endpoint& out) {
  change_->version = ++version_;
  change_->waiting = {};
  for (auto& s : ring_.servers()) change_->waiting.insert(s);
  for (auto& s : change_->target.servers()) change_->waiting.insert(s);
  change_->round_failed = change_->round_unreachable = 0;
  change_->retry_in_ticks = 0;
  send_target(out);
}

void mp_controller::round_done(transport::endpoint& out) {
  auto& c = *change_;
  if (c.round_unreachable == 0) return finish_change(out, false);
  // Publishing now would give those blocks' keys to owners that do not hold them: a block a
  // client was told is stored would be missed. The senders still hold them; they go again
  // (the hand-over timeout still bounds the change).
  c.retry_in_ticks = c.retries < 3 ? 1 << c.retries : max_retry_ticks; // 1, 2, 4, 8, 8, ...
  ++c.retries;
  out.log().info("ring change to version {}: {} blocks did not reach their new owner; the "
                 "servers plan it again in {} ticks (retry {})",
                 epoch_ + c.version, c.round_unreachable, c.retry_in_ticks, c.retries);
}

void mp_controller::finish_change(transport::endpoint& out, bool timed_out) {
  auto c = std::move(*change_);
  change_.reset();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - c.started)
                      .count();
  for (auto& s : ring_.servers())
    if (!c.target.contains(s)) usage_.erase(s);
  ring_ = std::move(c.target);
  if (c.version != version_) ++version_; // a server died meanwhile: a version of its own
  ring_version_ = version_;
  if (timed_out) {
    std::string late;
    for (auto& s : c.waiting) late += (late.empty() ? "" : ", ") + s;
    out.log().warn("ring version {}: the hand-over timed out after {} ms ({} blocks handed over, "
                   "{} failed); {}, and what was not handed over is lost to the cache",
                   epoch_ + version_, ms, c.blocks_moved, c.round_failed,
                   late.empty() ? "a round planned again had not begun" : late + " did not finish");
  } else {
    out.log().info("ring version {} published after a hand-over of {} blocks in {} ms and {} "
                   "round(s) ({} failed): {}",
                   epoch_ + version_, c.blocks_moved, ms, c.retries + 1, c.round_failed,
                   ring_.describe());
  }
  push_ring(out);
}

void mp_controller::settle(transport::endpoint& out) {
  if (settled_ || (ring_.size() < configured_servers_.size() && ticks_ < settle_ticks)) return;
  settled_ = true;
  out.log().info("ring settled with {} of {} servers", ring_.size(), configured_servers_.size());
  push_ring(out);
}

uint64_t mp_controller::copies() const {
  return std::clamp<uint64_t>(ring_.size(), 1, static_cast<uint64_t>(config_.replicas));
}

void mp_controller::make_ready(transport::endpoint& out, model_entry& m, const std::string& ns,
                               std::vector<std::string> block_keys, uint64_t bytes,
                               transport::shared_bytes manifest) {
  m.ready = true;
  m.ns = ns;
  m.block_keys = std::move(block_keys);
  m.bytes = bytes;
  m.manifest = std::move(manifest);
  m.last_used = ++clock_;
  for (auto& w : m.waiting) answer_claim(out, w, m);
  m.waiting.clear();
}

std::map<std::string, pr::ems_namespace_usage> mp_controller::namespace_usage() const {
  std::map<std::string, pr::ems_namespace_usage> total;
  for (auto& [server, namespaces] : usage_)
    for (auto& u : namespaces) {
      auto& t = total[u.ns];
      t.ns = u.ns;
      t.bytes += u.bytes;
      t.blocks += u.blocks;
    }
  return total;
}

std::map<std::string, mp_controller::model_index_entry> mp_controller::model_index() const {
  std::map<std::string, model_index_entry> index;
  for (auto& [key, m] : models_)
    if (m.ready) index[key] = {m.ns, m.block_keys, m.bytes};
  return index;
}

void mp_controller::answer_claim(transport::endpoint& out, const waiter& w, const model_entry& m) {
  pr::ems_model_claimed r;
  r.reply_to = w.request_id;
  r.ready = m.ready;
  if (m.ready) r.manifest = m.manifest;
  out.send_retrying("ems", w.peer, transport::make_envelope(std::move(r)));
}

void mp_controller::pass_claim(transport::endpoint& out, const std::string& model_key) {
  auto it = models_.find(model_key);
  if (it == models_.end()) return;
  auto& m = it->second;
  if (m.waiting.empty()) {
    models_.erase(it);
    return;
  }
  const waiter next = m.waiting.front();
  m.waiting.pop_front();
  m.fetcher = next.peer;
  answer_claim(out, next, m);
}

std::vector<std::string> mp_controller::evict_models(transport::endpoint& out,
                                                     const std::string& ns,
                                                     const std::string& keep) {
  std::optional<uint64_t> quota;
  for (auto& [name, bytes] : config_.quotas)
    if (name == ns) quota = bytes;
  std::vector<std::string> evicted;
  if (!quota) return evicted;
  for (;;) {
    uint64_t used = 0;
    std::string lru;
    uint64_t lru_clock = UINT64_MAX;
    for (auto& [key, m] : models_) {
      if (!m.ready || m.ns != ns) continue;
      used += m.bytes * copies(); // the quota counts every copy
      if (key != keep && m.last_used < lru_clock) lru_clock = m.last_used, lru = key;
    }
    if (used <= *quota || lru.empty()) return evicted;
    auto& m = models_.at(lru);
    // Removes go to each block's owner; a server that missed one drops the block by LRU later.
    std::map<std::string, std::vector<std::string>> by_server;
    if (ring_.size() > 0)
      for (auto& k : m.block_keys)
        for (auto& server : ring_.owners(ns, k, copies())) by_server[server].push_back(k);
    for (auto& [server, keys] : by_server)
      out.send("ems", server, transport::make_envelope(pr::ems_remove{0, ns, std::move(keys)}));
    out.log().info("evicted model {} ({} bytes) from namespace {}", lru, m.bytes, ns);
    evicted.push_back(lru);
    models_.erase(lru);
  }
}

void mp_controller::on(const transport::peer_id& from, const pr::ems_ring_request& q,
                       transport::endpoint& out) {
  if (q.leaving) {
    if (!is_server(from, out)) return;
    const bool on_a_ring = ring_.contains(from) || (change_ && change_->target.contains(from));
    joining_.erase(from);
    if (departing_.insert(from).second)
      out.log().info("{} asks to leave the ring: it hands its blocks over first", from);
    if (on_a_ring) {
      if (!change_ || change_->target.contains(from)) leaving_.insert(from);
      return; // it learns it is off from the push that publishes the ring without it
    }
    // Never on the ring: the answer tells it so.
  } else {
    subscribers_.insert(from);
    if (is_server(from, out) && !ring_.contains(from)) {
      server_up(from, "is up", out);
      if (ring_.contains(from)) return; // on at once: the asker gets the push with the others
    }
  }
  auto v = ring_view();
  v.reply_to = q.request_id;
  out.send_retrying("ems", from, transport::make_envelope(std::move(v)));
}

void mp_controller::on(const transport::peer_id& from, const pr::ems_model_claim& c,
                       transport::endpoint& out) {
  auto [it, fresh] = models_.try_emplace(c.model_key);
  auto& m = it->second;
  m.last_used = ++clock_;
  const waiter w{from, c.request_id};
  if (fresh) {
    m.fetcher = from; // yours to fetch
    answer_claim(out, w, m);
  } else if (m.ready) {
    answer_claim(out, w, m);
  } else {
    m.waiting.push_back(w); // answered when the fetcher registers (or fails)
  }
}

void mp_controller::on(const transport::peer_id& from, const pr::ems_model_register& r,
                       transport::endpoint& out) {
  pr::ems_model_registered reply;
  reply.reply_to = r.request_id;
  auto it = models_.find(r.model_key);
  if (!r.failed.ok()) {
    out.log().warn("fetch of model {} by {} failed: {}", r.model_key, from, r.failed.str());
    if (it != models_.end() && !it->second.ready) pass_claim(out, r.model_key);
  } else {
    make_ready(out, models_[r.model_key], r.ns, r.block_keys, r.bytes, r.manifest);
    reply.evicted = evict_models(out, r.ns, r.model_key);
  }
  out.send_retrying("ems", from, transport::make_envelope(std::move(reply)));
}

void mp_controller::on(const transport::peer_id& from, const pr::ems_server_report& r,
                       transport::endpoint& out) {
  if (r.incarnation != epoch_ || !is_server(from, out)) return; // for another one
  server_up(from, "reported", out);                             // it is alive: it reports
  if (!departing_.count(from)) usage_[from] = r.namespaces;
  for (auto& e : r.models) {
    auto& m = models_[e.model_key];
    if (m.ready) continue; // registered, or reported by another server holding a copy
    try {
      const auto bytes = std::as_bytes(std::span(e.manifest));
      const auto manifest = parse_manifest(bytes);
      if (manifest.key() != e.model_key) throw std::runtime_error("it names " + manifest.key());
      // What the fetching instance registered: its blocks and the manifest block.
      auto keys = manifest.block_keys();
      keys.push_back(model_manifest_key(e.model_key));
      make_ready(out, m, e.ns, std::move(keys), manifest.total_bytes() + e.manifest.size(),
                 transport::shared_bytes::copy_of(bytes.data(), bytes.size()));
      out.log().info("model {} is in the pool (reported by {})", e.model_key, from);
    } catch (const std::exception& error) {
      out.log().warn("{} reported model {} with a bad manifest: {}", from, e.model_key,
                     error.what());
      if (m.waiting.empty() && m.fetcher.empty()) models_.erase(e.model_key);
    }
  }
}

void mp_controller::on(const transport::peer_id& from, const pr::ems_handover_done& d,
                       transport::endpoint& out) {
  if (!change_ || d.target_version != epoch_ + change_->version) return; // an older change's
  if (!change_->waiting.erase(from)) return;
  change_->blocks_moved += d.blocks_sent;
  change_->round_failed += d.blocks_failed;
  change_->round_unreachable += d.blocks_unreachable;
  if (change_->waiting.empty()) round_done(out);
}

void mp_controller::on_tick(transport::endpoint& out) {
  ++ticks_;
  settle(out);
  if (change_ && std::chrono::steady_clock::now() - change_->started >=
                     std::chrono::milliseconds(config_.handover_timeout_ms))
    finish_change(out, true);
  else if (change_ && change_->retry_in_ticks > 0) {
    if (--change_->retry_in_ticks == 0) plan_again(out);
  } else if (change_ && ticks_ % target_resend_ticks == 0)
    send_target(out);
  // Joins and leaves asked for since the last change go together (a scale-down drains all its
  // servers at once).
  begin_change(out);
  protocol::load_report r;
  r.role = "mp_controller";
  send_load_report(out, std::move(r));
}

} // namespace supernode::services::ems
