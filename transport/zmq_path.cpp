#include "transport/zmq_path.hpp"

#include "transport/zmq_util.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <pthread.h>
#include <sys/eventfd.h>
#include <system_error>
#include <unistd.h>
#include <zmq_addon.hpp>

namespace supernode::transport::detail {

bool peer_link::reserve(size_t bytes, size_t max_messages, size_t max_bytes) {
  if (queued_messages.fetch_add(1) >= max_messages) {
    queued_messages.fetch_sub(1);
    return false;
  }
  const size_t before = queued_bytes.fetch_add(bytes);
  if (before > 0 && before + bytes > max_bytes) {
    release(bytes);
    return false;
  }
  return true;
}

void peer_link::release(size_t bytes) {
  queued_bytes.fetch_sub(bytes);
  queued_messages.fetch_sub(1);
}

namespace {

// Owns one frame while zmq sends its parts from where they are. Every part's free function
// drops a reference; the last one frees the frame and gives the reservation back to the peer,
// so the queue bound covers the bytes until zmq has written all of them.
struct in_flight {
  std::shared_ptr<peer_link> link;
  size_t bytes;
  encoded_frame frame;
  ~in_flight() { link->release(bytes); }
};

void release_part(void*, void* hint) {
  delete static_cast<std::shared_ptr<in_flight>*>(hint);
}

} // namespace

// Shows up in top and perf, next to zmq's own ZMQbg threads.
void zmq_path::name_thread(const char* role) {
  const std::string name = "sn-" + settings_.name + "-" + role;
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

zmq_path::zmq_path(path_settings settings, path_callbacks callbacks)
    : settings_(std::move(settings)), callbacks_(std::move(callbacks)), context_(1),
      router_(context_, zmq::socket_type::router) {
  if (settings_.keys) {
    zap_ = std::make_unique<zap_handler>(
        context_, settings_.keys, [this](const std::string& address, const std::string& why) {
          callbacks_.on_trouble("a client at " + address, "refused a key: " + why);
        });
    make_curve_server(router_, settings_.own);
  }
  router_.set(zmq::sockopt::linger, 0);
  // Routing ids are unique per DEALER socket (zmq_curve.hpp), so this only matters for a
  // socket that reconnects while its dead connection lingers here: the new one wins.
  router_.set(zmq::sockopt::router_handover, true);
  router_.set(zmq::sockopt::rcvhwm, settings_.receive_hwm);
  router_.set(zmq::sockopt::maxmsgsize, settings_.max_message_bytes);
  handshakes_ = std::make_unique<handshake_watch>(context_, router_);
  router_.bind(bindable_endpoint(settings_.bind_endpoint));
  endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  if (endpoint_.starts_with("ipc://") && endpoint_.size() > 6 && endpoint_[6] != '@')
    ipc_file_ = endpoint_.substr(6);
  command_fd_ = open_eventfd();
  receiver_fd_ = open_eventfd();
}

zmq_path::~zmq_path() {
  stop();
}

void zmq_path::start() {
  std::lock_guard lock(mutex_);
  if (started_ || stopped_) return;
  started_ = true;
  sender_ = std::thread([this] {
    name_thread("tx");
    run_sender();
  });
  receiver_ = std::thread([this] {
    name_thread("rx");
    run_receiver();
  });
}

void zmq_path::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
  }
  stopping_ = true;
  signal_eventfd(command_fd_);
  signal_eventfd(receiver_fd_);
  if (sender_.joinable()) sender_.join();
  if (receiver_.joinable()) receiver_.join();
  // The threads are gone, so their sockets can be closed here.
  for (auto& [key, d] : dealers_) {
    zmq_socket_monitor(d.socket.handle(), nullptr, 0);
    d.socket.close();
    d.monitor.close();
  }
  dealers_.clear();
  handshakes_->close();
  router_.close();
  if (zap_) zap_->close();
  {
    std::lock_guard lock(mutex_);
    for (auto& c : commands_)
      if (c.kind == op::send) c.link->release(c.frame.size());
    commands_.clear();
  }
  context_.close();
  if (!ipc_file_.empty()) ::unlink(ipc_file_.c_str()); // zmq leaves the socket file behind
  ::close(command_fd_);
  ::close(receiver_fd_);
}

void zmq_path::connect(std::shared_ptr<peer_link> link, const std::string& endpoint) {
  push({op::connect, std::move(link), endpoint, {}});
}

void zmq_path::disconnect(std::shared_ptr<peer_link> link) {
  push({op::disconnect, std::move(link), {}, {}});
}

void zmq_path::send(std::shared_ptr<peer_link> link, encoded_frame frame) {
  push({op::send, std::move(link), {}, std::move(frame)});
}

void zmq_path::push(command c) {
  bool was_empty;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) {
      if (c.kind == op::send) c.link->release(c.frame.size());
      return;
    }
    was_empty = commands_.empty();
    commands_.push_back(std::move(c));
  }
  // Only the first command of a batch needs a wake-up: the thread drains the whole queue.
  if (was_empty) signal_eventfd(command_fd_);
}

void zmq_path::run_sender() {
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<dealer*, bool /*monitor*/>> owners;
  std::deque<command> batch;
  while (!stopping_) {
    items.assign(1, {nullptr, command_fd_, ZMQ_POLLIN, 0});
    owners.clear();
    for (auto& [key, d] : dealers_) {
      items.push_back({d.monitor.handle(), 0, ZMQ_POLLIN, 0});
      owners.emplace_back(&d, true);
      if (!d.pending.empty()) {
        items.push_back({d.socket.handle(), 0, ZMQ_POLLOUT, 0});
        owners.emplace_back(&d, false);
      }
    }
    poll_retrying(items);
    // Sockets first: executing commands may close a dealer and invalidate `owners`.
    for (size_t i = 1; i < items.size(); ++i) {
      if (!items[i].revents) continue;
      auto [d, is_monitor] = owners[i - 1];
      if (is_monitor)
        drain_monitor(*d);
      else
        flush(*d);
    }
    if (items[0].revents) {
      // Read the eventfd before taking the queue, so a push after the swap wakes us again.
      clear_eventfd(command_fd_);
      {
        std::lock_guard lock(mutex_);
        batch.swap(commands_);
      }
      for (auto& c : batch) execute(c);
      batch.clear();
    }
  }
}

void zmq_path::execute(command& c) {
  switch (c.kind) {
  case op::connect:
    try {
      open_dealer(c.link, c.endpoint);
    } catch (const zmq::error_t& e) {
      callbacks_.on_trouble(c.link->id, "cannot connect to " + c.link->id + " at " + c.endpoint +
                                            ": " + e.what());
    }
    return;
  case op::disconnect: {
    auto it = dealers_.find(c.link.get());
    if (it == dealers_.end()) return;
    zmq_socket_monitor(it->second.socket.handle(), nullptr, 0);
    it->second.socket.close();
    it->second.monitor.close();
    dealers_.erase(it);
    return;
  }
  case op::send: {
    auto it = dealers_.find(c.link.get());
    const size_t size = c.frame.size();
    if (it == dealers_.end()) { // disconnected while the message waited
      c.link->release(size);
      return;
    }
    auto frame = std::make_shared<in_flight>(c.link, size, std::move(c.frame));
    outgoing out;
    for (auto piece : frame->frame.pieces())
      out.parts.emplace_back(const_cast<std::byte*>(piece.data()), piece.size(), &release_part,
                             new std::shared_ptr<in_flight>(frame));
    it->second.pending.push_back(std::move(out));
    flush(it->second);
    return;
  }
  }
}

void zmq_path::open_dealer(const std::shared_ptr<peer_link>& link, const std::string& endpoint) {
  dealer d{link,
           zmq::socket_t(context_, zmq::socket_type::dealer),
           zmq::socket_t(context_, zmq::socket_type::pair),
           {}};
  d.socket.set(zmq::sockopt::routing_id, connection_routing_id(settings_.self));
  d.socket.set(zmq::sockopt::linger, 0);
  if (settings_.keys) make_curve_client(d.socket, settings_.own, link->server_key);
  // No zmq bound: peer_link counts every message until it is on the wire and bounds that.
  d.socket.set(zmq::sockopt::sndhwm, 0);
  if (const auto timeout = settings_.heartbeat_timeout.count(); timeout > 0) {
    d.socket.set(zmq::sockopt::heartbeat_ivl,
                 static_cast<int>(std::min<int64_t>(1000, timeout / 3)));
    d.socket.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(timeout));
  }
  const std::string address = "inproc://zmq-path-monitor-" + std::to_string(monitors_opened_++);
  if (zmq_socket_monitor(d.socket.handle(), address.c_str(),
                         ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | handshake_failure_events) !=
      0)
    throw zmq::error_t();
  d.monitor.set(zmq::sockopt::linger, 0);
  d.monitor.connect(address);
  // Before connecting, so the first CONNECTED event is not missed.
  d.socket.connect(endpoint);
  dealers_.insert_or_assign(link.get(), std::move(d));
}

void zmq_path::drain_monitor(dealer& d) {
  monitor_event e;
  while (read_monitor_event(d.monitor, e)) {
    if (e.id == ZMQ_EVENT_CONNECTED || e.id == ZMQ_EVENT_DISCONNECTED)
      callbacks_.on_link(d.link, e.id == ZMQ_EVENT_CONNECTED, e.address);
    else if (auto why = handshake_failure(e.id, e.value))
      callbacks_.on_trouble(d.link->id, "handshake with " + d.link->id + " at " + e.address +
                                            " failed: " + *why);
  }
}

void zmq_path::flush(dealer& d) {
  while (!d.pending.empty()) {
    auto& out = d.pending.front();
    try {
      for (; out.next < out.parts.size(); ++out.next) {
        const bool more = out.next + 1 < out.parts.size();
        if (!d.socket.send(out.parts[out.next],
                           more ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                : zmq::send_flags::dontwait))
          return; // zmq is full; POLLOUT brings us back to the same part
      }
    } catch (const zmq::error_t& e) {
      callbacks_.on_trouble(d.link->id, "send to " + d.link->id + " failed: " + e.what());
    }
    d.pending.pop_front(); // sent, or dropped after an error (the free functions release it)
  }
}

std::chrono::steady_clock::time_point
zmq_path::read_up_to(std::chrono::steady_clock::time_point now) const {
  if (settings_.read_stamp_interval.count() <= 0) return now;
  const std::chrono::steady_clock::time_point caught_up(
      std::chrono::steady_clock::duration(receiver_caught_up_.load()));
  return std::min(now, caught_up);
}

void zmq_path::run_receiver() {
  std::vector<zmq::pollitem_t> items{{router_.handle(), 0, ZMQ_POLLIN, 0},
                                     {nullptr, receiver_fd_, ZMQ_POLLIN, 0},
                                     handshakes_->poll_item()};
  if (zap_) items.push_back(zap_->poll_item());
  std::vector<zmq::message_t> parts;
  const bool stamps = settings_.read_stamp_interval.count() > 0;
  const auto poll_timeout = stamps ? settings_.read_stamp_interval : std::chrono::milliseconds(-1);
  bool caught_up = true;
  while (!stopping_) {
    if (caught_up && stamps)
      receiver_caught_up_.store(std::chrono::steady_clock::now().time_since_epoch().count());
    poll_retrying(items, poll_timeout);
    caught_up = false;
    // Handshakes first: a flood of messages must not hold back a peer's connection.
    if (items[2].revents) handshakes_->drain(callbacks_.on_handshake_refused);
    if (zap_ && items[3].revents) zap_->serve();
    // A bounded batch, then poll again, so stop() is noticed under a flood.
    for (int i = 0; i < 64 && !stopping_; ++i) {
      parts.clear();
      try {
        if (!zmq::recv_multipart(router_, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
          caught_up = true;
          break;
        }
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        throw;
      }
      if (parts.size() < 2) continue; // a ROUTER always prefixes the routing id; nothing to deliver
      callbacks_.on_message(parts[0].to_string(), std::span(parts).subspan(1));
    }
  }
}

} // namespace supernode::transport::detail
