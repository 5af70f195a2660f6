#include "transport/pending_requests.hpp"

#include <vector>

namespace supernode::transport {

std::optional<uint64_t> pending_requests::add(const std::string& peer, steady_time deadline,
                                              completion done) {
  std::lock_guard lock(mutex_);
  if (entries_.size() >= limit_) return std::nullopt;
  const uint64_t id = next_id_++;
  entries_.emplace(id, entry{peer, deadline, std::move(done)});
  return id;
}

pending_requests::completion pending_requests::take(uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return {};
  completion done = std::move(it->second.done);
  entries_.erase(it);
  return done;
}

pending_requests::reply_outcome pending_requests::complete(uint64_t id, const std::string& from,
                                                           envelope reply) {
  completion done;
  {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return reply_outcome::late;
    if (it->second.peer != from) return reply_outcome::wrong_sender;
    done = std::move(it->second.done);
    entries_.erase(it);
  }
  done(std::move(reply), "");
  return reply_outcome::delivered;
}

template<class Pred>
size_t pending_requests::fail_where(Pred pred,
                                    const std::function<std::string(const entry&)>& why) {
  std::vector<std::pair<completion, std::string>> failed;
  {
    std::lock_guard lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (pred(it->second)) {
        failed.emplace_back(std::move(it->second.done), why(it->second));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Completions run outside the lock: they may add new requests.
  for (auto& [done, reason] : failed) done(std::nullopt, reason);
  return failed.size();
}

bool pending_requests::fail(uint64_t id, const std::string& reason) {
  completion done = take(id);
  if (!done) return false;
  done(std::nullopt, reason);
  return true;
}

size_t pending_requests::fail_peer(const std::string& peer, const std::string& reason) {
  return fail_where([&](const entry& e) { return e.peer == peer; },
                    [&](const entry& e) { return "peer " + e.peer + " is down: " + reason; });
}

size_t pending_requests::expire(steady_time now) {
  return fail_where([&](const entry& e) { return e.deadline <= now; },
                    [&](const entry& e) { return "request to " + e.peer + " timed out"; });
}

size_t pending_requests::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::optional<steady_time> pending_requests::next_deadline() const {
  std::lock_guard lock(mutex_);
  std::optional<steady_time> next;
  for (auto& [id, e] : entries_)
    if (!next || e.deadline < *next) next = e.deadline;
  return next;
}

} // namespace supernode::transport
