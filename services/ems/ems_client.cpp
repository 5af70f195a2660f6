#include "services/ems/ems_client.hpp"

#include "services/ems/block_checksum.hpp"
#include "services/protocol/ems_messages.hpp"
#include "services/serving/delivery.hpp"

#include <algorithm>
#include <cstring>
#include <set>

namespace supernode::services::ems {

namespace pr = protocol;

namespace {

// Keys of `keys` at `indices`, in that order.
std::vector<std::string> pick(std::span<const std::string> keys, const std::vector<size_t>& at) {
  std::vector<std::string> out;
  out.reserve(at.size());
  for (size_t i : at) out.push_back(keys[i]);
  return out;
}

// One server's share of a put: its keys, and their values back to back.
pr::ems_put put_message(const std::string& ns, std::span<const pool_put> items,
                        const std::vector<size_t>& at) {
  pr::ems_put msg;
  msg.ns = ns;
  size_t total = 0;
  for (size_t i : at) total += items[i].data.size();
  std::vector<char> data;
  data.reserve(total);
  for (size_t i : at) {
    msg.keys.push_back(items[i].key);
    msg.sizes.push_back(items[i].data.size());
    const auto* p = reinterpret_cast<const char*>(items[i].data.data());
    data.insert(data.end(), p, p + items[i].data.size());
  }
  msg.data = transport::shared_bytes(std::move(data));
  return msg;
}

// A server's share of a put cut into messages of at most max_put_bytes of values (a block
// larger than that travels alone), so every message fits the planes' frame limits.
constexpr size_t max_put_bytes = size_t{16} << 20;
std::vector<std::vector<size_t>> split_by_bytes(std::span<const pool_put> items,
                                                const std::vector<size_t>& at) {
  std::vector<std::vector<size_t>> out(1);
  size_t bytes = 0;
  for (size_t i : at) {
    const size_t n = items[i].data.size();
    if (!out.back().empty() && bytes + n > max_put_bytes) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(i);
    bytes += n;
  }
  return out;
}

// The same request with its id: what call() sends.
template<class Message>
std::function<transport::envelope(uint64_t)> with_id(const Message& msg) {
  return [&msg](uint64_t id) {
    auto m = msg;
    m.request_id = id;
    return transport::make_envelope(std::move(m));
  };
}

template<class Reply>
const Reply* reply_as(const std::optional<transport::envelope>& e, std::string& error,
                      const std::string& server) {
  if (!e) return nullptr;
  if (const Reply* r = e->get<Reply>()) return r;
  error = server + " answered with the wrong message type";
  return nullptr;
}

} // namespace

ems_client::ems_client(transport::endpoint& out, const ems_config& config)
    : out_(out), config_(config), timeout_(config.timeout_ms) {
  pr::register_ems_messages();
  auto controllers = instances_with_role(out.cluster(), "mp_controller");
  if (!controllers.empty()) controller_ = controllers.front();
}

ems_client::~ems_client() = default;

void ems_client::on_ring_view(const pr::ems_ring_view& view) {
  auto ring = std::make_shared<hash_ring>(view.vnodes);
  for (auto& s : view.servers) ring->add_server(s);
  {
    std::lock_guard lock(mutex_);
    if (view.version < ring_version_) return; // overtaken by a newer view
    if (ring_ && view.version != ring_version_ && ring_->servers() != ring->servers())
      ring_moved_ = true;
    ring_version_ = view.version;
    ring_ = std::move(ring);
  }
  ring_changed_.notify_all();
}

bool ems_client::wait_for_ring(
    const std::function<bool(const std::vector<std::string>& servers)>& ready,
    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  refresh_ring(); // also subscribes: the changes are pushed
  std::unique_lock lock(mutex_);
  return ring_changed_.wait_until(
      lock, deadline, [&] { return ready(ring_ ? ring_->servers() : std::vector<std::string>{}); });
}

bool ems_client::wait_for_servers(std::chrono::milliseconds timeout) {
  return wait_for_ring([](const auto& servers) { return !servers.empty(); }, timeout);
}

bool ems_client::ring_moved() const {
  std::lock_guard lock(mutex_);
  return ring_moved_;
}

uint64_t ems_client::ring_version() const {
  std::lock_guard lock(mutex_);
  return ring_version_;
}

std::vector<std::string> ems_client::servers() const {
  std::lock_guard lock(mutex_);
  return ring_ ? ring_->servers() : std::vector<std::string>{};
}

ems_client_stats ems_client::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

// ---- requests ----------------------------------------------------------------------------------

void ems_client::call(const std::string& peer,
                      const std::function<transport::envelope(uint64_t)>& make, reply_fn done) {
  auto shared_done = std::make_shared<reply_fn>(std::move(done));
  auto id = out_.pending().add(
      peer, std::chrono::steady_clock::now() + timeout_,
      [shared_done](std::optional<transport::envelope> reply, const std::string& error) {
        (*shared_done)(call_result{std::move(reply), error});
      });
  if (!id) {
    (*shared_done)(call_result{std::nullopt, "too many requests in flight to " + peer});
    return;
  }
  const auto status = send_with_backoff(out_, "ems", peer, make(*id), timeout_);
  if (status != transport::send_status::ok)
    out_.pending().fail(*id, "cannot reach " + peer + ": " + transport::to_string(status));
}

std::future<ems_client::call_result>
ems_client::call(const std::string& peer,
                 const std::function<transport::envelope(uint64_t)>& make) {
  auto promise = std::make_shared<std::promise<call_result>>();
  auto future = promise->get_future();
  call(peer, make, [promise](call_result r) { promise->set_value(std::move(r)); });
  return future;
}

ems_client::call_result ems_client::wait(std::future<call_result>& f) {
  // Pending requests expire on the endpoint's heartbeat tick; the margin covers a late tick.
  if (f.wait_for(timeout_ + std::chrono::seconds(2)) != std::future_status::ready)
    return {std::nullopt, "no answer within " + std::to_string(timeout_.count()) + " ms"};
  auto r = f.get();
  if (!r.reply) {
    std::lock_guard lock(mutex_);
    ++stats_.failed_calls;
  }
  return r;
}

bool ems_client::refresh_ring() {
  if (controller_.empty()) return false;
  auto f = call(controller_,
                [](uint64_t id) { return transport::make_envelope(pr::ems_ring_request{id}); });
  auto r = wait(f);
  std::string error;
  const auto* view = reply_as<pr::ems_ring_view>(r.reply, error, controller_);
  if (view) on_ring_view(*view);
  return view != nullptr;
}

std::shared_ptr<const hash_ring> ems_client::ring() {
  {
    std::lock_guard lock(mutex_);
    if (ring_) return ring_;
  }
  refresh_ring();
  std::lock_guard lock(mutex_);
  return ring_;
}

std::map<std::string, std::vector<size_t>>
ems_client::route(const hash_ring& ring, const std::string& ns,
                  std::span<const std::string> keys) const {
  std::map<std::string, std::vector<size_t>> by_server;
  for (size_t i = 0; i < keys.size(); ++i) by_server[ring.owner(ns, keys[i])].push_back(i);
  return by_server;
}

std::shared_ptr<transport::shm_region> ems_client::region_of(const std::string& server,
                                                             const std::string& name) {
  std::lock_guard lock(mutex_);
  if (auto it = regions_.find(server); it != regions_.end()) return it->second;
  if (unmappable_locked(server)) return nullptr;
  try {
    if (auto r = transport::shm_region::try_open(out_.cluster().name, name)) {
      auto shared = std::make_shared<transport::shm_region>(std::move(*r));
      regions_[server] = shared;
      return shared;
    }
  } catch (const std::exception&) {}
  // Another host, or the server is not up yet: read by value until a later call maps it.
  return nullptr;
}

void ems_client::forget_region(const std::string& server) {
  std::lock_guard lock(mutex_);
  regions_.erase(server);
}

namespace {
constexpr auto remap_after = std::chrono::seconds(1);
}

bool ems_client::unmappable_locked(const std::string& server) const {
  const auto it = unmappable_until_.find(server);
  return it != unmappable_until_.end() && std::chrono::steady_clock::now() < it->second;
}

void ems_client::mark_unmappable(const std::string& server) {
  std::lock_guard lock(mutex_);
  unmappable_until_[server] = std::chrono::steady_clock::now() + remap_after;
}

// ---- data calls --------------------------------------------------------------------------------

void ems_client::put_outcomes(const std::string& ns, std::span<const pool_put> items,
                              std::function<void(std::vector<pool_put_outcome>)> done) {
  auto r = ring();
  if (!r || r->size() == 0) {
    std::vector<pool_put_outcome> out(items.size());
    for (auto& o : out)
      o.error = {pr::ems_errc::server_unreachable, controller_.empty()
                                                       ? "no MP controller in the cluster"
                                                       : "no MP server on the ring"};
    return done(std::move(out));
  }
  std::vector<std::string> keys;
  for (auto& i : items) keys.push_back(i.key);
  std::vector<std::pair<std::string, std::vector<size_t>>> groups;
  for (auto& [server, all] : route(*r, ns, keys))
    for (auto& at : split_by_bytes(items, all)) groups.emplace_back(server, std::move(at));
  // Built before any put goes out: `done` may run (and the caller free the values) before
  // this returns.
  std::vector<std::pair<std::string, pr::ems_put>> second_copies;
  if (config_.replicas > 1) {
    std::vector<size_t> all(items.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    for (auto& [server, second] : route_to_second_owner(*r, ns, keys, all))
      for (auto& at : split_by_bytes(items, second))
        second_copies.emplace_back(server, put_message(ns, items, at));
  }
  // The answers arrive on plane threads, in any order; the last one hands the outcomes over.
  struct tally {
    std::mutex mutex;
    size_t waiting = 0;
    std::vector<pool_put_outcome> out;
    std::function<void(std::vector<pool_put_outcome>)> done;
  };
  auto t = std::make_shared<tally>();
  t->waiting = groups.size();
  t->out.resize(items.size());
  t->done = std::move(done);
  for (auto& [server, at] : groups) {
    auto msg = put_message(ns, items, at);
    call(server, with_id(msg), [t, at](call_result result) {
      std::string error = result.error;
      const auto* reply = reply_as<pr::ems_put_reply>(result.reply, error, "MP server");
      std::unique_lock lock(t->mutex);
      for (size_t j = 0; j < at.size(); ++j) {
        auto& o = t->out[at[j]];
        if (reply && j < reply->errors.size()) {
          o.stored = reply->errors[j].ok();
          o.error = reply->errors[j];
        } else if (reply) {
          o.error = {pr::ems_errc::malformed_request, "a put reply without this key's outcome"};
        } else {
          o.error = {pr::ems_errc::server_unreachable, error};
        }
      }
      if (--t->waiting > 0) return;
      lock.unlock();
      t->done(std::move(t->out));
    });
  }
  // The second copies go after the owners' puts and nobody waits for their answers: a put
  // succeeds when the owner took it, and a second server that is down costs only the copy.
  for (auto& [server, msg] : second_copies) call(server, with_id(msg), [](call_result) {});
}

std::vector<pool_put_outcome> ems_client::put(const std::string& ns,
                                              std::span<const pool_put> items) {
  auto promise = std::make_shared<std::promise<std::vector<pool_put_outcome>>>();
  auto future = promise->get_future();
  put_outcomes(ns, items, [promise](auto out) { promise->set_value(std::move(out)); });
  // Requests end by reply, failure or deadline (the endpoint's tick); the margin covers a late
  // tick.
  if (future.wait_for(timeout_ + std::chrono::seconds(2)) != std::future_status::ready) {
    std::vector<pool_put_outcome> out(items.size());
    for (auto& o : out)
      o.error = {pr::transport_errc::timeout,
                 "no answer within " + std::to_string(timeout_.count()) + " ms"};
    return out;
  }
  return future.get();
}

void ems_client::put_async(const std::string& ns, std::span<const pool_put> items, put_done done) {
  put_outcomes(ns, items, [done = std::move(done)](std::vector<pool_put_outcome> out) {
    size_t stored = 0;
    std::string error;
    for (auto& o : out) {
      stored += o.stored;
      if (!o.stored && error.empty()) error = o.error.str();
    }
    if (done) done(stored, out.size() - stored, error);
  });
}

std::map<std::string, std::vector<size_t>>
ems_client::route_to_second_owner(const hash_ring& ring, const std::string& ns,
                                  std::span<const std::string> keys,
                                  const std::vector<size_t>& at) const {
  std::map<std::string, std::vector<size_t>> by_server;
  if (ring.size() < 2) return by_server;
  for (size_t i : at) by_server[ring.owners(ns, keys[i], 2)[1]].push_back(i);
  return by_server;
}

std::vector<size_t> ems_client::second_round_keys(std::vector<size_t> missed,
                                                  const std::vector<size_t>& unanswered) const {
  if (config_.replicas > 1) missed.insert(missed.end(), unanswered.begin(), unanswered.end());
  return missed;
}

void ems_client::get_round(const std::string& ns, std::span<const std::string> keys,
                           const std::map<std::string, std::vector<size_t>>& groups,
                           bool allow_reference, pool_get_outcome& out, std::vector<size_t>& missed,
                           std::vector<size_t>& unanswered) {
  auto note_error = [&](const std::string& e) {
    ++out.errors;
    if (out.first_error.empty()) out.first_error = e;
  };
  struct pending_get {
    std::string server;
    std::vector<size_t> at;
    bool by_reference = false;
    std::future<call_result> reply;
  };
  auto ask = [&](const std::string& server, std::vector<size_t> at, bool by_reference) {
    pr::ems_get msg;
    msg.ns = ns;
    msg.keys = pick(keys, at);
    msg.by_reference = by_reference;
    return pending_get{server, std::move(at), by_reference, call(server, with_id(msg))};
  };
  std::vector<pending_get> calls;
  for (auto& [server, at] : groups) {
    bool by_reference = allow_reference && config_.read_over_ub;
    if (by_reference) {
      std::lock_guard lock(mutex_);
      by_reference = !unmappable_locked(server);
    }
    calls.push_back(ask(server, at, by_reference));
  }
  ems_client_stats counted; // added to stats_ once, not under the lock per block
  // Further passes: blocks a full reply left out (asked again the same way) and region copies
  // that failed their checksum (asked again by value). Each pass gets at least one block or
  // ends a key, so the bound is never reached in practice.
  for (size_t pass = 0; pass <= keys.size() && !calls.empty(); ++pass) {
    std::vector<pending_get> again_calls;
    for (auto& c : calls) {
      auto result = wait(c.reply);
      std::string error = result.error;
      const auto* reply = reply_as<pr::ems_get_reply>(result.reply, error, c.server);
      if (!reply) {
        note_error(error);
        unanswered.insert(unanswered.end(), c.at.begin(), c.at.end());
        continue;
      }
      if (reply->sizes.size() != c.at.size() || reply->offsets.size() != c.at.size() ||
          reply->checksums.size() != c.at.size()) {
        note_error("malformed get reply from " + c.server);
        unanswered.insert(unanswered.end(), c.at.begin(), c.at.end());
        continue;
      }
      std::shared_ptr<transport::shm_region> region;
      std::vector<size_t> again, later;
      uint64_t data_at = 0;
      const auto data = reply->data.bytes();
      for (size_t j = 0; j < c.at.size(); ++j) {
        const int64_t size = reply->sizes[j];
        if (size == pr::ems_ask_again) {
          later.push_back(c.at[j]);
          continue;
        }
        if (size < 0) {
          missed.push_back(c.at[j]);
          continue;
        }
        const auto n = static_cast<uint64_t>(size);
        auto& slot = out.blocks[c.at[j]];
        if (reply->offsets[j] < 0) {
          if (n > data.size() - data_at) {
            note_error("malformed get reply from " + c.server + ": data too short");
            break;
          }
          slot.emplace(data.begin() + data_at, data.begin() + data_at + n);
          data_at += n;
          ++counted.vpc_reads;
          counted.vpc_bytes += n;
          continue;
        }
        if (!region) region = region_of(c.server, reply->region);
        const auto offset = static_cast<uint64_t>(reply->offsets[j]);
        if (!region || offset > region->size() || n > region->size() - offset) {
          if (!region) mark_unmappable(c.server);
          again.push_back(c.at[j]);
          continue;
        }
        std::vector<std::byte> bytes(n);
        if (n > 0) std::memcpy(bytes.data(), region->data() + offset, n);
        // The server may have evicted and reused the place while we copied: the checksum says.
        if (block_checksum(ns, keys[c.at[j]], bytes) != reply->checksums[j]) {
          again.push_back(c.at[j]);
          continue;
        }
        slot = std::move(bytes);
        ++counted.ub_reads;
        counted.ub_bytes += n;
      }
      if (!again.empty()) {
        counted.ub_retries += again.size();
        forget_region(c.server); // it may be a restarted server's new region
        again_calls.push_back(ask(c.server, std::move(again), false));
      }
      if (!later.empty()) again_calls.push_back(ask(c.server, std::move(later), c.by_reference));
    }
    calls = std::move(again_calls);
  }
  std::lock_guard lock(mutex_);
  stats_.ub_reads += counted.ub_reads;
  stats_.ub_bytes += counted.ub_bytes;
  stats_.ub_retries += counted.ub_retries;
  stats_.vpc_reads += counted.vpc_reads;
  stats_.vpc_bytes += counted.vpc_bytes;
}

pool_get_outcome ems_client::get(const std::string& ns, std::span<const std::string> keys) {
  pool_get_outcome out;
  out.blocks.resize(keys.size());
  auto r = ring();
  if (!r || r->size() == 0) {
    if (!keys.empty()) {
      ++out.errors;
      out.first_error =
          controller_.empty() ? "no MP controller in the cluster" : "no MP server on the ring";
    }
    return out;
  }
  std::vector<size_t> missed, unanswered, missed_again, unanswered_again;
  get_round(ns, keys, route(*r, ns, keys), true, out, missed, unanswered);
  // The second owner holds the second copy, or the key when the ring moved it to a server that
  // joined since it was stored. Only worth a round with replicas or once the ring has changed.
  const auto second = second_round_keys(std::move(missed), unanswered);
  if (!second.empty() && ask_second_owner())
    get_round(ns, keys, route_to_second_owner(*r, ns, keys, second), true, out, missed_again,
              unanswered_again);
  return out;
}

std::vector<bool> ems_client::exists(const std::string& ns, std::span<const std::string> keys) {
  std::vector<bool> out(keys.size(), false);
  auto r = ring();
  if (!r || r->size() == 0) return out;
  auto round = [&](const std::map<std::string, std::vector<size_t>>& groups) {
    std::vector<std::pair<std::vector<size_t>, std::future<call_result>>> calls;
    for (auto& [server, at] : groups) {
      pr::ems_exists msg{0, ns, pick(keys, at)};
      calls.emplace_back(at, call(server, with_id(msg)));
    }
    std::vector<size_t> missed; // absent, or its server did not answer
    for (auto& [at, f] : calls) {
      auto result = wait(f);
      std::string error;
      const auto* reply = reply_as<pr::ems_exists_reply>(result.reply, error, "MP server");
      for (size_t j = 0; j < at.size(); ++j) {
        const bool present = reply && reply->present.size() == at.size() && reply->present[j];
        out[at[j]] = out[at[j]] || present;
        if (!present) missed.push_back(at[j]);
      }
    }
    return missed;
  };
  auto missed = round(route(*r, ns, keys));
  if (!missed.empty() && ask_second_owner()) round(route_to_second_owner(*r, ns, keys, missed));
  return out;
}

size_t ems_client::remove(const std::string& ns, std::span<const std::string> keys) {
  auto r = ring();
  if (!r || r->size() == 0) return 0;
  auto remove_at = [&](const std::string& server, const std::vector<size_t>& at) {
    pr::ems_remove msg{0, ns, pick(keys, at)};
    return call(server, with_id(msg));
  };
  auto removed_by = [this](std::future<call_result>& f) -> std::optional<size_t> {
    auto result = wait(f);
    std::string error;
    if (auto* reply = reply_as<pr::ems_remove_reply>(result.reply, error, "MP server"))
      return reply->removed;
    return std::nullopt;
  };
  // One remove per owner, and with replicas one per (owner, second owner): a key counts as
  // removed at its owner, or at its second owner when the owner did not answer.
  struct owner_calls {
    std::future<call_result> owner;
    std::vector<std::future<call_result>> seconds;
  };
  std::vector<owner_calls> calls;
  for (auto& [server, at] : route(*r, ns, keys)) {
    owner_calls c{remove_at(server, at), {}};
    if (config_.replicas > 1)
      for (auto& [second, second_at] : route_to_second_owner(*r, ns, keys, at))
        c.seconds.push_back(remove_at(second, second_at));
    calls.push_back(std::move(c));
  }
  size_t removed = 0;
  for (auto& c : calls) {
    const auto at_owner = removed_by(c.owner);
    size_t at_seconds = 0;
    for (auto& f : c.seconds) at_seconds += removed_by(f).value_or(0);
    removed += at_owner.value_or(at_seconds);
  }
  return removed;
}

std::vector<std::string> ems_client::list(const std::string& ns) {
  auto r = ring();
  if (!r) return {};
  std::vector<std::future<call_result>> calls;
  for (auto& server : r->servers())
    calls.push_back(call(server, [&ns](uint64_t id) {
      return transport::make_envelope(pr::ems_list{id, ns});
    }));
  std::set<std::string> keys;
  for (auto& f : calls) {
    auto result = wait(f);
    std::string error;
    if (auto* reply = reply_as<pr::ems_list_reply>(result.reply, error, "MP server"))
      keys.insert(reply->keys.begin(), reply->keys.end());
  }
  return {keys.begin(), keys.end()};
}

// ---- model registry ----------------------------------------------------------------------------

model_claim ems_client::claim_model(const std::string& model_key) {
  if (controller_.empty())
    throw std::runtime_error("cannot claim model " + model_key + ": no MP controller");
  // The controller holds the answer while another instance fetches: wait as long as a fetch
  // from object storage may take, not the data-call timeout.
  auto promise = std::make_shared<std::promise<call_result>>();
  auto f = promise->get_future();
  auto id = out_.pending().add(
      controller_, std::chrono::steady_clock::now() + std::chrono::hours(1),
      [promise](std::optional<transport::envelope> reply, const std::string& error) {
        promise->set_value(call_result{std::move(reply), error});
      });
  if (!id) throw std::runtime_error("cannot claim model " + model_key + ": too many requests");
  const auto status =
      send_with_backoff(out_, "ems", controller_,
                        transport::make_envelope(pr::ems_model_claim{*id, model_key}), timeout_);
  if (status != transport::send_status::ok)
    out_.pending().fail(*id, "cannot reach " + controller_ + ": " + transport::to_string(status));
  auto r = f.get();
  std::string error = r.error;
  const auto* reply = reply_as<pr::ems_model_claimed>(r.reply, error, controller_);
  if (!reply) throw std::runtime_error("cannot claim model " + model_key + ": " + error);
  model_claim c;
  c.what = reply->ready ? model_claim::state::ready : model_claim::state::fetch;
  const auto m = reply->manifest.bytes();
  c.manifest.assign(m.begin(), m.end());
  return c;
}

void ems_client::register_model(const std::string& model_key, const std::string& ns,
                                std::span<const std::byte> manifest,
                                std::span<const std::string> block_keys, uint64_t bytes,
                                const std::string& failed) {
  if (controller_.empty())
    throw std::runtime_error("cannot register model " + model_key + ": no MP controller");
  pr::ems_model_register msg;
  msg.model_key = model_key;
  msg.ns = ns;
  msg.block_keys.assign(block_keys.begin(), block_keys.end());
  msg.bytes = bytes;
  if (!failed.empty()) msg.failed = {pr::ems_errc::fetch_failed, failed};
  msg.manifest = transport::shared_bytes::copy_of(manifest.data(), manifest.size());
  auto f = call(controller_, with_id(msg));
  auto r = wait(f);
  std::string error = r.error;
  if (!reply_as<pr::ems_model_registered>(r.reply, error, controller_))
    throw std::runtime_error("cannot register model " + model_key + ": " + error);
}

} // namespace supernode::services::ems
