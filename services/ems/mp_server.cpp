#include "services/ems/mp_server.hpp"

#include "services/ems/model_blocks.hpp"
#include "services/protocol/ems_messages.hpp"
#include "services/serving/delivery.hpp"

#include <algorithm>
#include <sys/mman.h>

namespace supernode::services::ems {

namespace pr = protocol;

std::filesystem::path server_data_dir(const ems_config& config,
                                      const transport::cluster_config& cluster,
                                      const std::string& instance) {
  if (!config.data_dir.empty()) return config.data_dir / instance;
  return cluster.run_dir / "ems" / instance;
}

std::string server_region_name(const std::string& instance) {
  return "ems." + instance;
}

mp_server::mp_server(const transport::cluster_config& cluster, const std::string& instance,
                     const ems_config& config)
    : instance_(instance), model_namespace_(config.model_namespace), timeout_(config.timeout_ms),
      handover_timeout_(config.handover_timeout_ms), copies_(config.replicas), handover_(instance) {
  pr::register_serving_messages();
  pr::register_ems_messages();
  region_ = transport::shm_region::create(cluster.name, server_region_name(instance),
                                          config.dram_bytes, 0);
  // A shared mapping cannot be hugetlb-backed without a hugetlbfs mount; ask for transparent
  // huge pages instead (honoured when the kernel enables them for shmem).
  if (config.huge_pages) ::madvise(region_.data(), region_.size(), MADV_HUGEPAGE);
  block_store_options o;
  o.dram_bytes = config.dram_bytes;
  o.dram_high_watermark = config.dram_high_watermark;
  o.ssd_dir = server_data_dir(config, cluster, instance);
  o.ssd_bytes = config.ssd_bytes;
  o.huge_pages = config.huge_pages;
  o.dram_memory = std::span(region_.data(), region_.size());
  store_ = std::make_unique<block_store>(o);
}

mp_server::~mp_server() {
  stop();
}

void mp_server::start(transport::endpoint& out) {
  out_ = &out;
  out.log().info("{}", store_->describe());
  worker_.start([this] { return !requests_.empty(); },
                [this] {
                  decltype(requests_) batch;
                  {
                    std::lock_guard lock(worker_.mutex());
                    batch.swap(requests_);
                  }
                  for (auto& task : batch) task();
                  std::lock_guard lock(stats_mutex_);
                  stats_ = store_->stats();
                  handover_totals_ = handover_.totals();
                  handover_idle_ = handover_.idle() && held_acks_.empty();
                });
}

void mp_server::stop() {
  worker_.stop();
}

void mp_server::reply(const transport::peer_id& to, transport::envelope m) {
  // A client that went away loses only its own answer.
  send_with_backoff(*out_, "ems", to, m);
}

void mp_server::on(const transport::peer_id& from, const pr::ems_ring_view& v,
                   transport::endpoint& out) {
  if (!out.expect_role(from, "mp_controller", "ems_ring_view")) return;
  if (v.version < ring_version_) return; // an older push overtaken by a newer one
  ring_version_ = v.version;
  on_ring_ = std::find(v.servers.begin(), v.servers.end(), instance_) != v.servers.end();
  if (leaving_ && !on_ring_ && !left_.exchange(true)) {
    handover_idle_ = false; // until the storage thread has seen the ring below
    out.log().info("off the ring (version {}): drained once its last forwards are answered",
                   v.version);
  }
  auto quotas = v.quotas;
  enqueue([this, quotas = std::move(quotas), v, off = leaving_ && !on_ring_] {
    for (auto& [ns, bytes] : quotas) store_->set_quota(ns, bytes);
    const auto version = v.version;
    if (off) { // drained once what is queued or still put here has gone to the owners
      forwarding_ = true;
      handover_.forward_to(version, v.vnodes, copies_, v.servers);
      pump_handover();
      return;
    }
    handover_.learn_ring(version, v.vnodes, copies_, v.servers);
    // A change at or below this version is over for the controller; what it still has queued
    // (puts that landed during it, or blocks a timed-out change had not sent) goes on.
    if (const auto left = handover_.end(version)) {
      out_->log().info("ring version {} published with {} blocks still to hand over", version,
                       left);
      pump_handover();
    }
  });
  if (v.incarnation != 0 && v.incarnation != reported_incarnation_) {
    reported_incarnation_ = v.incarnation; // a controller this server has not told yet
    controller_ = from;
    enqueue_report(true);
  }
}

void mp_server::on(const transport::peer_id& from, const pr::ems_ring_target& t,
                   transport::endpoint& out) {
  if (!out.expect_role(from, "mp_controller", "ems_ring_target")) return;
  if (t.version <= ring_version_) return; // published already
  enqueue([this, t, from] {
    handover_controller_ = from;
    // The controller sends a target again until this server answers it: a change already
    // running goes on, and one already finished says so again (that answer may be lost).
    if (handover_.active() && handover_.version() == t.version) {
      if (handover_.finished_reported()) send_handover_done();
      return;
    }
    handover_.begin(t, *store_);
    out_->log().info("ring change to version {}: handing {} blocks over", t.version,
                     handover_.planned());
    pump_handover();
  });
}

void mp_server::pump_handover() {
  while (auto batch = handover_.next_batch(*store_)) send_handover_batch(std::move(*batch));
  release_held_acks();
  if (!handover_.take_finished()) return;
  out_->log().info("handed {} blocks over for ring version {} in {} ms ({} failed)",
                   handover_.change_sent(), handover_.version(), handover_.elapsed().count(),
                   handover_.change_failed());
  send_handover_done();
}

void mp_server::send_handover_done() {
  out_->send_retrying("ems", handover_controller_,
                      transport::make_envelope(pr::ems_handover_done{
                          handover_.version(), handover_.change_sent(), handover_.change_failed(),
                          handover_.change_unreachable()}));
}

void mp_server::release_held_acks() {
  if (held_acks_.empty() || !handover_.idle()) return;
  for (auto& held : held_acks_) {
    // A batch failed since: which of its blocks is not known, so none of these is claimed.
    if (handover_.totals().blocks_failed > held.failed_before)
      for (auto& e : held.reply.errors)
        if (e.ok())
          e = {pr::ems_errc::server_unreachable,
               instance_ + " left the ring and could not forward the block to its owner"};
    reply(held.to, transport::make_envelope(std::move(held.reply)));
  }
  held_acks_.clear();
}

void mp_server::send_handover_batch(handover_batch batch) {
  const uint64_t version = handover_.version();
  const uint64_t blocks = batch.put.keys.size(), planned = batch.planned;
  const auto to = batch.to;
  // The answer comes on a plane thread; the hand-over is the storage thread's.
  auto id = out_->pending().add(
      to, std::chrono::steady_clock::now() + timeout_,
      [this, version, blocks, planned, to](std::optional<transport::envelope> reply,
                                           const std::string& error) {
        uint64_t stored = 0;
        if (const auto* r = reply ? reply->get<pr::ems_put_reply>() : nullptr)
          for (auto& e : r->errors) stored += e.ok() ? 1 : 0;
        if (stored < blocks)
          out_->log().warn("{} of {} blocks handed over to {} were not stored: {}", blocks - stored,
                           blocks, to, reply ? "refused" : error);
        const bool unreachable = !reply;
        enqueue([this, version, blocks, planned, stored, unreachable] {
          handover_.answered(version, planned, stored, blocks - stored, unreachable);
          pump_handover();
        });
      });
  if (!id) {
    handover_.answered(version, planned, 0, blocks, true);
    return;
  }
  batch.put.request_id = *id;
  const auto status =
      send_with_backoff(*out_, "ems", to, transport::make_envelope(std::move(batch.put)), timeout_);
  if (status != transport::send_status::ok)
    out_->pending().fail(*id, "cannot reach " + to + ": " + transport::to_string(status));
}

handover_totals mp_server::handover_counts() {
  std::lock_guard lock(stats_mutex_);
  return handover_totals_;
}

void mp_server::drain(drain_mode) {
  if (leaving_.exchange(true)) return;
  const auto deadline =
      std::chrono::steady_clock::now() + handover_timeout_ + std::chrono::seconds(5);
  drain_deadline_ns_ = deadline.time_since_epoch().count();
  // Never on a ring (still starting, or the controller never answered): nothing to hand over.
  if (!on_ring_) left_ = true;
}

bool mp_server::drained() const {
  if (left_ && handover_idle_) return true;
  // No published ring without this server in time (the controller gone): its blocks stay here.
  return leaving_ &&
         std::chrono::steady_clock::now().time_since_epoch().count() > drain_deadline_ns_.load();
}

void mp_server::on_member_event(const transport::membership_event& event,
                                transport::endpoint& out) {
  if (event.what != transport::membership_event::kind::joined) return;
  const auto controllers = instances_with_role(out.cluster(), "mp_controller");
  if (std::find(controllers.begin(), controllers.end(), event.peer) == controllers.end()) return;
  out.send("ems", event.peer, transport::make_envelope(pr::ems_ring_request{0}));
}

pr::ems_server_report mp_server::report(uint64_t incarnation, bool full) {
  pr::ems_server_report r;
  r.incarnation = incarnation;
  r.full = full;
  r.namespaces = store_->usage();
  if (!full) return r;
  for (auto& key : store_->keys(model_namespace_)) {
    auto model = model_key_of_manifest_key(key);
    if (!model) continue;
    auto bytes = store_->get(model_namespace_, key);
    if (!bytes) continue; // corrupt: the controller learns the model from another copy or not
    const auto* p = reinterpret_cast<const char*>(bytes->data());
    r.models.push_back({std::move(*model), model_namespace_, {p, p + bytes->size()}});
  }
  return r;
}

void mp_server::enqueue_report(bool full) {
  ticks_since_report_ = 0;
  enqueue([this, full, to = controller_, incarnation = reported_incarnation_] {
    auto r = report(incarnation, full);
    // The full report must arrive (the controller's model index depends on it); a lost usage
    // report is replaced by the next.
    if (full)
      out_->send_retrying("ems", to, transport::make_envelope(std::move(r)));
    else
      out_->send("ems", to, transport::make_envelope(std::move(r)));
  });
}

void mp_server::enqueue(std::function<void()> task) {
  {
    std::lock_guard lock(worker_.mutex());
    requests_.push_back(std::move(task));
  }
  worker_.notify();
}

void mp_server::serve(const transport::peer_id& from, const pr::ems_put& p, bool handed_over) {
  pr::ems_put_reply r;
  r.reply_to = p.request_id;
  bool stray = false; // a block whose owners on the newest ring are other servers
  if (p.sizes.size() != p.keys.size()) {
    r.errors.assign(p.keys.size(), {pr::ems_errc::malformed_request,
                                    "malformed ems_put: " + std::to_string(p.keys.size()) +
                                        " keys but " + std::to_string(p.sizes.size()) + " sizes"});
  } else {
    uint64_t at = 0;
    const auto data = p.data.bytes();
    for (size_t i = 0; i < p.keys.size(); ++i) {
      if (p.sizes[i] > data.size() - at) {
        r.errors.push_back({pr::ems_errc::malformed_request,
                            "malformed ems_put: value of '" + p.keys[i] + "' runs past the data"});
        at = data.size();
        continue;
      }
      auto result = store_->put(p.ns, p.keys[i], data.subspan(at, p.sizes[i]));
      at += p.sizes[i];
      r.errors.push_back(result.error);
      if (!result) continue;
      if (handed_over) {
        handover_.count_received(1);
        handover_.note_put(p.ns, p.keys[i]); // a block a running change moves goes too
      } else {
        stray |= handover_.note_client_put(p.ns, p.keys[i]);
      }
    }
  }
  if ((forwarding_ || stray) && p.request_id != 0) {
    held_acks_.push_back({from, std::move(r), handover_.totals().blocks_failed});
    pump_handover();
    return;
  }
  if (handover_.active()) pump_handover();
  if (p.request_id != 0) reply(from, transport::make_envelope(std::move(r)));
}

void mp_server::serve(const transport::peer_id& from, const pr::ems_get& g) {
  pr::ems_get_reply r;
  r.reply_to = g.request_id;
  r.region = server_region_name(instance_);
  std::vector<char> data;
  for (auto& key : g.keys) {
    std::optional<block_store::dram_ref> ref;
    if (data.size() >= max_reply_bytes) {
      r.sizes.push_back(pr::ems_ask_again); // this reply is full: the client asks for it again
      r.offsets.push_back(-1);
      r.checksums.push_back(0);
      continue;
    }
    if (g.by_reference) {
      ref = store_->get_ref(g.ns, key);
    } else if (auto bytes = store_->get(g.ns, key)) {
      ref = block_store::dram_ref{std::nullopt, bytes->size(), 0, std::move(*bytes)};
    }
    if (!ref) {
      r.sizes.push_back(-1);
      r.offsets.push_back(-1);
      r.checksums.push_back(0);
      continue;
    }
    r.sizes.push_back(static_cast<int64_t>(ref->size));
    r.checksums.push_back(ref->checksum);
    if (ref->offset) {
      r.offsets.push_back(static_cast<int64_t>(*ref->offset));
    } else {
      r.offsets.push_back(-1);
      const auto* p = reinterpret_cast<const char*>(ref->data.data());
      data.insert(data.end(), p, p + ref->data.size());
    }
  }
  r.data = transport::shared_bytes(std::move(data));
  reply(from, transport::make_envelope(std::move(r)));
}

void mp_server::serve(const transport::peer_id& from, const pr::ems_exists& e) {
  pr::ems_exists_reply r;
  r.reply_to = e.request_id;
  for (auto& key : e.keys) r.present.push_back(store_->exists(e.ns, key));
  reply(from, transport::make_envelope(std::move(r)));
}

void mp_server::serve(const transport::peer_id& from, const pr::ems_remove& rm) {
  pr::ems_remove_reply r;
  r.reply_to = rm.request_id;
  for (auto& key : rm.keys) r.removed += store_->remove(rm.ns, key) ? 1 : 0;
  if (rm.request_id != 0) reply(from, transport::make_envelope(std::move(r)));
}

void mp_server::serve(const transport::peer_id& from, const pr::ems_list& l) {
  pr::ems_list_reply r;
  r.reply_to = l.request_id;
  r.keys = store_->keys(l.ns);
  reply(from, transport::make_envelope(std::move(r)));
}

void mp_server::on_tick(transport::endpoint& out) {
  // Until the controller answered once: its pushes carry the quotas (answered with reply_to 0,
  // so the answer arrives here like a push).
  if (ring_version_ == 0)
    for (auto& c : instances_with_role(out.cluster(), "mp_controller"))
      out.send("ems", c, transport::make_envelope(pr::ems_ring_request{0}));
  // Until the controller publishes a ring without this server (asked again in case one is lost).
  if (leaving_ && !left_)
    for (auto& c : instances_with_role(out.cluster(), "mp_controller"))
      out.send("ems", c, transport::make_envelope(pr::ems_ring_request{0, true}));
  if (reported_incarnation_ != 0 && ++ticks_since_report_ >= usage_report_ticks)
    enqueue_report(false);
  block_store_stats s;
  handover_totals h;
  {
    std::lock_guard lock(stats_mutex_);
    s = stats_;
    h = handover_totals_;
  }
  pr::load_report r;
  r.role = "mp_server";
  auto& c = r.cache;
  c.dram_blocks = s.dram_blocks;
  c.dram_bytes = s.dram_bytes;
  c.ssd_blocks = s.ssd_blocks;
  c.ssd_bytes = s.ssd_bytes;
  c.dram_hits = s.dram_hits;
  c.ssd_hits = s.ssd_hits;
  c.misses = s.misses;
  c.corrupt_blocks = s.corrupt_blocks;
  c.evicted_dram = s.evictions_dram_to_ssd;
  c.deleted_ssd = s.ssd_deletions;
  c.rejected_puts = s.rejected_puts;
  c.handed_over_in = h.blocks_in;
  c.handed_over_out = h.blocks_out;
  c.handover_failed = h.blocks_failed;
  send_load_report(out, std::move(r));
}

} // namespace supernode::services::ems
