#include "services/ems/mp_controller.hpp"

#include "services/protocol/ems_messages.hpp"
#include "services/serving/delivery.hpp"

namespace supernode::services::ems {

namespace pr = protocol;

mp_controller::mp_controller(const transport::cluster_config& cluster, const ems_config& config)
    : config_(config), ring_(config.vnodes) {
  pr::register_ems_messages();
  epoch_ = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count())
           << 16;
  // A server goes on the ring when it first asks for it (it is up and its tier is rebuilt), not
  // when the config names it: processes start in any order, and a ring naming a server that is
  // still starting would send puts nowhere.
  for (auto& s : instances_with_role(cluster, "mp_server")) configured_servers_.insert(s);
}

void mp_controller::start(transport::endpoint& out) {
  out.log().info("{}", ring_.describe());
  push_ring(out);
}

pr::ems_ring_view mp_controller::ring_view() const {
  pr::ems_ring_view v;
  v.version = epoch_ + ring_.version();
  v.vnodes = ring_.vnodes_per_server();
  v.servers = ring_.servers();
  // The model namespace is bounded by whole-model eviction here, not by per-server quotas
  // (a server refusing one block of a model would leave the model half stored).
  const uint64_t n = std::max<uint64_t>(1, ring_.size());
  for (auto& [ns, bytes] : config_.quotas)
    if (ns != config_.model_namespace) v.quotas.emplace_back(ns, bytes / n);
  return v;
}

void mp_controller::push_ring(transport::endpoint& out) {
  const auto v = ring_view();
  auto message = transport::make_envelope(v);
  std::set<transport::peer_id> targets = subscribers_;
  targets.insert(v.servers.begin(), v.servers.end());
  for (auto& t : targets) out.send("ems", t, message); // a lost push is re-asked on a miss
}

void mp_controller::on_member_event(const transport::membership_event& event,
                                    transport::endpoint& out) {
  const bool server = configured_servers_.count(event.peer) != 0;
  if (server) {
    const bool up = event.what == transport::membership_event::kind::joined;
    if (up && !ring_.contains(event.peer)) {
      ring_.add_server(event.peer);
    } else if (!up && ring_.contains(event.peer)) {
      ring_.remove_server(event.peer);
    } else {
      return;
    }
    out.log().info("{} {} ({}): {}", event.peer, up ? "joined" : "left the ring", event.reason,
                   ring_.describe());
    push_ring(out);
  }
  if (event.what == transport::membership_event::kind::joined) return;
  subscribers_.erase(event.peer);
  // A fetcher that died will never register its model: the next waiter fetches instead.
  std::vector<std::string> orphaned;
  for (auto& [key, m] : models_)
    if (!m.ready && m.fetcher == event.peer) orphaned.push_back(key);
  for (auto& key : orphaned) pass_claim(out, key);
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
      used += m.bytes;
      if (key != keep && m.last_used < lru_clock) lru_clock = m.last_used, lru = key;
    }
    if (used <= *quota || lru.empty()) return evicted;
    auto& m = models_.at(lru);
    // Removes go to each block's owner; a server that missed one drops the block by LRU later.
    std::map<std::string, std::vector<std::string>> by_server;
    if (ring_.size() > 0)
      for (auto& k : m.block_keys) by_server[ring_.owner(ns, k)].push_back(k);
    for (auto& [server, keys] : by_server)
      out.send("ems", server, transport::make_envelope(pr::ems_remove{0, ns, std::move(keys)}));
    out.log().info("evicted model {} ({} bytes) from namespace {}", lru, m.bytes, ns);
    evicted.push_back(lru);
    models_.erase(lru);
  }
}

void mp_controller::on(const transport::peer_id& from, const pr::ems_ring_request& q,
                       transport::endpoint& out) {
  subscribers_.insert(from);
  if (configured_servers_.count(from) && !ring_.contains(from)) {
    ring_.add_server(from);
    out.log().info("{} is up: {}", from, ring_.describe());
    push_ring(out); // the asker gets it with the others
    return;
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
    auto& m = models_[r.model_key];
    m.ready = true;
    m.ns = r.ns;
    m.block_keys = r.block_keys;
    m.bytes = r.bytes;
    m.manifest = r.manifest;
    m.last_used = ++clock_;
    for (auto& w : m.waiting) answer_claim(out, w, m);
    m.waiting.clear();
    reply.evicted = evict_models(out, r.ns, r.model_key);
  }
  out.send_retrying("ems", from, transport::make_envelope(std::move(reply)));
}

void mp_controller::on_tick(transport::endpoint& out) {
  protocol::load_report r;
  r.role = "mp_controller";
  send_load_report(out, std::move(r));
}

} // namespace supernode::services::ems
