#include "services/ems/block_handover.hpp"

#include <algorithm>

namespace supernode::services::ems {

namespace pr = protocol;

std::vector<std::string> handover_destinations(const hash_ring& current, const hash_ring& target,
                                               size_t copies, const std::string& self,
                                               std::string_view ns, std::string_view key) {
  std::vector<std::string> to;
  if (current.size() == 0 || target.size() == 0) return to;
  const auto now = current.owners(ns, key, copies);
  auto owns_now = [&](const std::string& s) {
    return std::find(now.begin(), now.end(), s) != now.end();
  };
  if (!owns_now(self)) return to; // a stale copy: its owner hands it over
  for (auto& s : target.owners(ns, key, copies))
    if (s != self && !owns_now(s)) to.push_back(s);
  return to;
}

hash_ring ring_of(int32_t vnodes, const std::vector<std::string>& servers) {
  hash_ring ring(vnodes);
  for (auto& s : servers) ring.add_server(s);
  return ring;
}

void block_handover::begin(const pr::ems_ring_target& target, const block_store& store) {
  // A change still running is replaced: planning every block again covers its unsent ones,
  // except those this server holds without owning them (put here during that change by a
  // client with the older ring): those go to their owners under the new target.
  std::vector<std::pair<std::string, std::string>> carried;
  if (change_)
    for (auto& [where, keys] : change_->queue)
      for (auto& [key, initial] : keys) carried.emplace_back(where.second, key);
  change_.emplace();
  change_->target = target;
  change_->current = ring_of(target.vnodes, target.current_servers);
  change_->next = ring_of(target.vnodes, target.servers);
  change_->started = std::chrono::steady_clock::now();
  learn_ring(target.version, target.vnodes, target.copies, target.servers);
  for (auto& usage : store.usage())
    for (auto& key : store.keys(usage.ns)) plan(usage.ns, key, true);
  const auto copies = static_cast<size_t>(std::max(1, target.copies));
  for (auto& [ns, key] : carried) {
    if (!handover_destinations(change_->current, change_->next, copies, self_, ns, key).empty())
      continue; // planned above
    for (auto& to : change_->next.owners(ns, key, copies))
      if (to != self_) queue_to(to, ns, key, true);
  }
}

bool block_handover::plan(const std::string& ns, const std::string& key, bool initial) {
  const auto copies = static_cast<size_t>(std::max(1, change_->target.copies));
  const auto to = handover_destinations(change_->current, change_->next, copies, self_, ns, key);
  for (auto& server : to) queue_to(server, ns, key, initial);
  return !to.empty();
}

void block_handover::queue_to(const std::string& to, const std::string& ns, const std::string& key,
                              bool initial) {
  change_->queue[{to, ns}].emplace_back(key, initial);
  ++change_->planned;
  change_->initial_left += initial ? 1 : 0;
}

void block_handover::learn_ring(uint64_t version, int32_t vnodes, int32_t copies,
                                const std::vector<std::string>& servers) {
  if (newest_ && newest_->version >= version) return; // a target's ring is its published one
  newest_ = known_ring{version, static_cast<size_t>(std::max(1, copies)), ring_of(vnodes, servers)};
}

void block_handover::note_put(const std::string& ns, const std::string& key) {
  if (change_) plan(ns, key, false);
}

bool block_handover::note_client_put(const std::string& ns, const std::string& key) {
  // The change moves it, and a server leaves only once its change is idle.
  if (change_ && plan(ns, key, false)) return false;
  if (!newest_ || newest_->ring.size() == 0) return false; // no ring yet: every put is ours
  auto owners = newest_->ring.owners(ns, key, newest_->copies);
  if (std::find(owners.begin(), owners.end(), self_) != owners.end()) return false;
  // Neither ours nor moved by a change: a put that crossed the publish of a ring on which its
  // owner is another server. It goes there, in a change that closes once idle.
  if (!change_) { // moves nothing of its own: the ring it comes from is the newest too
    const auto servers = newest_->ring.servers();
    open_forwarding(newest_->version, newest_->ring.vnodes_per_server(),
                    static_cast<int32_t>(newest_->copies), servers, servers, true);
  }
  for (auto& to : owners) queue_to(to, ns, key, false);
  return true;
}

std::optional<handover_batch> block_handover::next_batch(block_store& store) {
  if (!change_ || change_->in_flight >= max_batches_in_flight) return std::nullopt;
  for (auto& [where, keys] : change_->queue) {
    const auto& [to, ns] = where;
    handover_batch b;
    b.to = to;
    b.put.ns = ns;
    std::vector<char> data;
    while (!keys.empty() && data.size() < batch_bytes_ && b.put.keys.size() < max_batch_blocks) {
      auto [key, initial] = std::move(keys.front());
      keys.pop_front();
      auto bytes = store.get(ns, key);
      if (!bytes) { // removed, evicted or corrupt since it was planned: nothing to hand over
        --change_->planned;
        change_->initial_left -= initial ? 1 : 0;
        continue;
      }
      b.planned += initial ? 1 : 0;
      const auto* p = reinterpret_cast<const char*>(bytes->data());
      data.insert(data.end(), p, p + bytes->size());
      b.put.sizes.push_back(bytes->size());
      b.put.keys.push_back(std::move(key));
    }
    if (b.put.keys.empty()) continue;
    b.put.data = transport::shared_bytes(std::move(data));
    ++change_->in_flight;
    return b;
  }
  std::erase_if(change_->queue, [](auto& q) { return q.second.empty(); });
  close_if_done();
  return std::nullopt;
}

void block_handover::answered(uint64_t version, uint64_t planned, uint64_t stored, uint64_t failed,
                              bool unreachable) {
  totals_.blocks_out += stored;
  totals_.blocks_failed += failed;
  if (!change_ || change_->target.version != version) return; // a replaced change's batch
  --change_->in_flight;
  change_->initial_left -= std::min(change_->initial_left, planned);
  change_->sent += stored;
  change_->failed += failed;
  if (unreachable) change_->unreachable += failed;
  close_if_done();
}

void block_handover::close_if_done() {
  if (change_ && change_->published && change_->in_flight == 0 && queued() == 0) change_.reset();
}

uint64_t block_handover::queued() const {
  uint64_t n = 0;
  for (auto& [where, keys] : change_->queue) n += keys.size();
  return n;
}

bool block_handover::take_finished() {
  if (!change_ || change_->reported || change_->initial_left > 0) return false;
  change_->reported = true;
  return true;
}

uint64_t block_handover::end(uint64_t published_version) {
  if (!change_ || change_->target.version > published_version) return 0;
  change_->published = true;
  change_->reported = true; // the controller no longer waits for it
  const uint64_t left = queued();
  close_if_done();
  return left;
}

void block_handover::forward_to(uint64_t version, int32_t vnodes, int32_t copies,
                                const std::vector<std::string>& servers) {
  learn_ring(version, vnodes, copies, servers);
  // Everything here goes, and the change is open until the process exits: stale clients'
  // puts go on.
  open_forwarding(version, vnodes, copies, {self_}, servers, false);
}

void block_handover::open_forwarding(uint64_t version, int32_t vnodes, int32_t copies,
                                     const std::vector<std::string>& from,
                                     const std::vector<std::string>& servers, bool published) {
  if (!change_) {
    change_.emplace();
    change_->started = std::chrono::steady_clock::now();
  }
  change_->reported = true; // the controller is done with this server
  change_->published = published;
  change_->target = {};
  change_->target.copies = copies;
  change_->target.version = version;
  change_->target.vnodes = vnodes;
  change_->target.current_servers = from;
  change_->target.servers = servers;
  change_->current = ring_of(vnodes, from);
  change_->next = ring_of(vnodes, servers);
}

std::chrono::milliseconds block_handover::elapsed() const {
  if (!change_) return {};
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               change_->started);
}

} // namespace supernode::services::ems
