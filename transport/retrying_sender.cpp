#include "transport/retrying_sender.hpp"

namespace supernode::transport {

retrying_sender::retrying_sender(send_fn send) : send_(std::move(send)) {}

retrying_sender::~retrying_sender() {
  stop();
}

void retrying_sender::set_failure_handler(failure_fn f) {
  std::lock_guard lock(mutex_);
  on_failure_ = std::move(f);
}

send_status retrying_sender::send(const std::string& flow, const peer_id& to,
                                  const envelope& message, std::chrono::milliseconds deadline) {
  std::unique_lock lock(mutex_);
  if (stopping_) return send_status::closed;
  const key k{flow, to};
  auto it = waiting_.find(k);
  if (it == waiting_.end()) {
    // Nothing ahead of it: try now, without holding the lock across the plane's send.
    lock.unlock();
    const auto status = send_(flow, to, message);
    if (status != send_status::queue_full) return status;
    lock.lock();
    if (stopping_) return send_status::closed;
    it = waiting_.try_emplace(k).first;
    it->second.next_try = clock::now() + it->second.pause;
  }
  it->second.items.push_back({message, clock::now() + deadline});
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  wake_.notify_one();
  return send_status::ok;
}

void retrying_sender::retry_due(clock::time_point now, std::vector<std::pair<key, item>>& failed,
                                std::vector<send_status>& statuses) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    auto& d = it->second;
    if (d.next_try > now) {
      ++it;
      continue;
    }
    send_status status = send_status::ok;
    while (!d.items.empty()) {
      status = send_(it->first.first, it->first.second, d.items.front().message);
      if (status != send_status::ok) break;
      d.items.pop_front();
      d.pause = std::chrono::microseconds(50);
    }
    const bool expired = !d.items.empty() && d.items.front().deadline <= now;
    if (!d.items.empty() && (status != send_status::queue_full || expired)) {
      // Final for this destination: what follows would only overtake what is lost.
      for (auto& i : d.items) {
        failed.emplace_back(it->first, std::move(i));
        statuses.push_back(status);
      }
      d.items.clear();
    }
    if (d.items.empty()) {
      it = waiting_.erase(it);
      continue;
    }
    d.pause = std::min(d.pause * 2, std::chrono::microseconds(10000));
    d.next_try = now + d.pause;
    ++it;
  }
}

void retrying_sender::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (waiting_.empty()) {
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
      continue;
    }
    auto next = clock::time_point::max();
    for (auto& [k, d] : waiting_) next = std::min(next, d.next_try);
    if (next > clock::now()) {
      wake_.wait_until(lock, next);
      continue;
    }
    std::vector<std::pair<key, item>> failed;
    std::vector<send_status> statuses;
    retry_due(clock::now(), failed, statuses);
    given_up_ += failed.size();
    auto report = on_failure_;
    lock.unlock();
    if (report)
      for (size_t i = 0; i < failed.size(); ++i)
        report(failed[i].first.first, failed[i].first.second, failed[i].second.message,
               statuses[i]);
    lock.lock();
  }
}

void retrying_sender::stop() {
  std::map<key, destination> left;
  failure_fn report;
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    left.swap(waiting_);
    for (auto& [k, d] : left) given_up_ += d.items.size();
    report = on_failure_;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& [k, d] : left) {
    if (report)
      for (auto& i : d.items) report(k.first, k.second, i.message, send_status::closed);
  }
}

size_t retrying_sender::queued() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (auto& [k, d] : waiting_) n += d.items.size();
  return n;
}

uint64_t retrying_sender::given_up() const {
  std::lock_guard lock(mutex_);
  return given_up_;
}

} // namespace supernode::transport
