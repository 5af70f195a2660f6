#include "transport/inproc_plane.hpp"

namespace supernode::transport {

void inproc_hub::attach(const peer_id& id, inproc_plane* plane) {
  std::lock_guard lock(mutex_);
  planes_[id] = plane;
}

void inproc_hub::detach(const peer_id& id, inproc_plane* plane) {
  std::lock_guard lock(mutex_);
  auto it = planes_.find(id);
  if (it != planes_.end() && it->second == plane) planes_.erase(it);
}

inproc_plane* inproc_hub::find(const peer_id& id) {
  auto it = planes_.find(id);
  return it == planes_.end() ? nullptr : it->second;
}

inproc_plane::inproc_plane(std::shared_ptr<inproc_hub> hub, peer_id self, size_t queue_limit)
    : hub_(std::move(hub)), self_(std::move(self)), queue_limit_(queue_limit) {
  hub_->attach(self_, this);
}

inproc_plane::~inproc_plane() {
  stop();
  hub_->detach(self_, this);
}

send_status inproc_plane::send(const peer_id& to, const envelope& message) {
  // The hub lock keeps the target alive while we enqueue: detach takes the same lock.
  std::lock_guard lock(hub_->mutex());
  inproc_plane* target = hub_->find(to);
  if (!target) return send_status::unknown_peer;
  auto status = target->enqueue(self_, message);
  if (status == send_status::ok)
    counters_.messages_sent.fetch_add(1);
  else if (status == send_status::queue_full)
    counters_.queue_full.fetch_add(1);
  return status;
}

send_status inproc_plane::enqueue(const peer_id& from, const envelope& message) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return send_status::closed;
    if (queue_.size() >= queue_limit_) return send_status::queue_full;
    queue_.emplace_back(from, message);
  }
  ready_.notify_one();
  return send_status::ok;
}

void inproc_plane::set_handler(message_handler handler) {
  std::lock_guard lock(mutex_);
  handler_ = std::move(handler);
}

void inproc_plane::start() {
  std::lock_guard lock(mutex_);
  if (running_) return;
  running_ = true;
  thread_ = std::thread([this] { run(); });
}

void inproc_plane::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  ready_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void inproc_plane::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    ready_.wait(lock, [&] { return stopping_ || (!queue_.empty() && handler_); });
    if (stopping_) return;
    auto [from, message] = std::move(queue_.front());
    queue_.pop_front();
    auto handler = handler_;
    lock.unlock();
    counters_.messages_received.fetch_add(1);
    handler(from, std::move(message));
    lock.lock();
  }
}

} // namespace supernode::transport
