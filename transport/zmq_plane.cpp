#include "transport/zmq_plane.hpp"

#include "transport/cluster_keys.hpp"
#include "transport/zmq_path.hpp"
#include "transport/zmq_util.hpp"

#include <vector>

namespace supernode::transport {

namespace {

constexpr int control_path = 0, bulk_path = 1;
const char* path_name(int path) {
  return path == control_path ? "control" : "bulk";
}

} // namespace

zmq_plane::zmq_plane(zmq_plane_options options) : options_(std::move(options)) {
  log_ = log::logger{options_.self};
  auto callbacks = [this](int path) {
    detail::path_callbacks c;
    c.on_message = [this, path](const std::string& from, std::span<zmq::message_t> parts) {
      on_message(path_name(path), from, parts);
    };
    c.on_link = [this, path](const std::shared_ptr<detail::peer_link>& link, bool connected,
                             const std::string& where) { on_link(path, link, connected, where); };
    c.on_trouble = [this, path](const std::string& peer, const std::string& what) {
      log_.limited(peer_lines_, log::level::warn,
                   std::string(path_name(path)) + " path trouble with " + peer, "zmq: {} path: {}",
                   path_name(path), what);
    };
    c.on_handshake_refused = [this, path](const std::string& where, const std::string& why) {
      counters_.handshakes_refused.fetch_add(1);
      log_.limited(peer_lines_, log::level::warn,
                   std::string(path_name(path)) + " path refused a handshake",
                   "zmq: {} path refused a handshake from {}: {}", path_name(path), where, why);
    };
    return c;
  };
  // Throws naming the key file when self has no key pair: better than an open door.
  const auto own = options_.keys ? options_.keys->own(options_.self) : curve_keypair{};
  auto settings = [&](const char* name, int path, const std::string& endpoint) {
    detail::path_settings s;
    s.name = name;
    s.index = path;
    s.self = options_.self;
    s.bind_endpoint = endpoint;
    s.max_message_bytes = options_.max_message_bytes;
    s.keys = options_.keys;
    s.own = own;
    return s;
  };
  auto control = settings("control", control_path, options_.control_endpoint);
  // Small frames only, so a PONG is never stuck behind a transfer.
  control.heartbeat_timeout = options_.link_timeout;
  // Heartbeats ride the control path: liveness judges silence only up to what it has read.
  control.read_stamp_interval = options_.read_stamp_interval;
  auto bulk = settings("bulk", bulk_path, options_.bulk_endpoint);
  bulk.receive_hwm = options_.bulk_receive_hwm;
  control_ = std::make_unique<detail::zmq_path>(std::move(control), callbacks(control_path));
  bulk_ = std::make_unique<detail::zmq_path>(std::move(bulk), callbacks(bulk_path));
}

zmq_plane::~zmq_plane() {
  stop();
}

std::string zmq_plane::control_endpoint() const {
  return control_->endpoint();
}
std::string zmq_plane::bulk_endpoint() const {
  return bulk_->endpoint();
}

void zmq_plane::set_handler(message_handler handler) {
  {
    std::lock_guard lock(mutex_);
    handler_ = std::make_shared<const message_handler>(std::move(handler));
  }
  handler_set_.notify_all();
}

void zmq_plane::set_disconnect_handler(std::function<void(const peer_id&)> handler) {
  plane::set_disconnect_handler(
      [h = std::move(handler)](const peer_id& peer, const std::string&) { h(peer); });
}

void zmq_plane::start() {
  control_->start();
  bulk_->start();
}

void zmq_plane::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
    peers_.clear();
  }
  handler_set_.notify_all(); // a receive thread may wait for a handler that never comes
  control_->stop();
  bulk_->stop();
}

void zmq_plane::connect(const peer_id& peer, const std::string& control_endpoint,
                        const std::string& bulk_endpoint) {
  std::string server_key;
  if (options_.keys) {
    auto key = options_.keys->public_key(peer);
    if (!key) {
      log_.limited(peer_lines_, log::level::error, "no public key for " + peer,
                   "zmq: cannot connect to {}: no public key {}.public in {} (`supernode cluster "
                   "keys --config FILE` makes the cluster's keys); sends to it answer unknown_peer",
                   peer, peer, options_.keys->dir().string());
      disconnect(peer); // an older connection must not outlive the key it was made with
      return;
    }
    server_key = std::move(*key);
  }
  auto link = std::make_shared<detail::peer_link>(peer, std::move(server_key));
  // Under the lock, so no send() can queue a message for the link ahead of its connect.
  std::lock_guard lock(mutex_);
  if (stopped_) return;
  auto& slot = peers_[peer];
  if (slot) {
    control_->disconnect(slot);
    bulk_->disconnect(slot);
  }
  slot = link;
  control_->connect(link, control_endpoint);
  bulk_->connect(link, bulk_endpoint);
}

void zmq_plane::disconnect(const peer_id& peer) {
  std::lock_guard lock(mutex_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return;
  control_->disconnect(it->second);
  bulk_->disconnect(it->second);
  peers_.erase(it);
}

send_status zmq_plane::send(const peer_id& to, const envelope& message) {
  std::shared_ptr<detail::peer_link> link;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return send_status::closed;
    auto it = peers_.find(to);
    if (it == peers_.end()) return send_status::unknown_peer;
    link = it->second;
  }
  if (link->down) return send_status::peer_down;
  // Checked before encoding too, so a full queue costs the caller nothing.
  if (link->queued_messages.load() >= options_.queue_limit) {
    counters_.queue_full.fetch_add(1);
    return send_status::queue_full;
  }
  // Large shared_bytes bodies are not copied: zmq sends them from the message as their own parts.
  encoded_frame frame = message.encode_spliced();
  const size_t size = frame.size();
  const auto* info = message_registry::instance().find(message.type());
  if (size - frame_header_bytes > info->max_bytes) return send_status::too_large;
  if (!link->reserve(size, options_.queue_limit, options_.queue_bytes_limit)) {
    counters_.queue_full.fetch_add(1);
    return send_status::queue_full;
  }
  counters_.messages_sent.fetch_add(1);
  counters_.bytes_sent.fetch_add(size);
  auto& path = size > options_.bulk_threshold ? bulk_ : control_;
  path->send(std::move(link), std::move(frame));
  return send_status::ok;
}

std::shared_ptr<const message_handler> zmq_plane::wait_for_handler() {
  std::unique_lock lock(mutex_);
  handler_set_.wait(lock, [&] { return handler_ || stopped_; });
  return stopped_ ? nullptr : handler_;
}

bool zmq_plane::sender_proven(const char* path, std::string_view claimed,
                              const zmq::message_t& first) {
  if (!options_.keys) return true;
  const auto proven = detail::proven_sender(first);
  if (proven && *proven == claimed) return true;
  counters_.identity_mismatch.fetch_add(1);
  const auto claim = detail::printable(std::string(claimed));
  const std::string key = proven ? *proven : "(no key)";
  log_.limited(peer_lines_, log::level::warn, "identity mismatch: " + key + " as " + claim,
               "zmq: dropped a message on the {} path that claims to be from '{}' but whose "
               "connection proved the key of {}",
               path, claim, key);
  return false;
}

void zmq_plane::on_message(const char* path, const std::string& routing_id,
                           std::span<zmq::message_t> parts) {
  const std::string from(detail::claimed_name(routing_id));
  if (!sender_proven(path, from, parts.front())) return;
  // Each part moves into shared ownership, so a decoded message's shared_bytes can reference the
  // bytes zmq received instead of copying them; they live as long as the message does.
  std::vector<frame_part> pieces;
  pieces.reserve(parts.size());
  size_t total = 0;
  for (auto& part : parts) {
    auto held = std::make_shared<zmq::message_t>(std::move(part));
    const std::span bytes(static_cast<const std::byte*>(held->data()), held->size());
    total += bytes.size();
    pieces.push_back({bytes, std::move(held)});
  }
  std::string why;
  auto message = decode_frame(pieces, counters_.bad_frames, &why);
  pieces.clear();
  if (!message) {
    // `from` is the name the sender claims: proven under CURVE, any bytes it chose without.
    const auto sender = detail::printable(from);
    log_.limited(peer_lines_, log::level::warn, "bad frame from " + sender,
                 "zmq: bad frame from '{}' on the {} path: {}", sender, path, why);
    return;
  }
  counters_.messages_received.fetch_add(1);
  counters_.bytes_received.fetch_add(total);
  auto handler = wait_for_handler();
  if (!handler) return;
  try {
    (*handler)(from, std::move(*message));
  } catch (const std::exception& e) {
    // The receive thread serves every peer: one failing message must not end it.
    const auto sender = detail::printable(from);
    log_.limited(peer_lines_, log::level::error, "handler threw on a message from " + sender,
                 "zmq: handler threw on a message from '{}': {}", sender, e.what());
  }
}

steady_time zmq_plane::read_up_to(steady_time now) const {
  return control_->read_up_to(now);
}

bool zmq_plane::link_down(const peer_id& peer) const {
  std::lock_guard lock(mutex_);
  const auto it = peers_.find(peer);
  return it != peers_.end() && it->second->down.load();
}

void zmq_plane::on_link(int path, const std::shared_ptr<detail::peer_link>& link, bool connected,
                        const std::string& where) {
  link->connected[path] = connected;
  if (connected) {
    if (link->connected[control_path] && link->connected[bulk_path]) link->down = false;
    return;
  }
  if (link->down.exchange(true)) return; // the other path already reported it
  {
    std::lock_guard lock(mutex_);
    auto it = peers_.find(link->id);
    if (it == peers_.end() || it->second != link)
      return; // disconnected or replaced by us meanwhile
  }
  if (on_disconnect_)
    on_disconnect_(link->id, std::string(path_name(path)) + " connection to " + where + " dropped");
}

} // namespace supernode::transport
