#pragma once
// Requests waiting for a reply from a peer. Nothing waits forever: each request has a deadline
// and fails with a named error when the deadline passes or when its peer is declared down
// (ZeroMQ and CAF alike leave in-flight requests to a dead peer hanging otherwise).

#include "transport/membership.hpp"
#include "transport/message.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace supernode::transport {

class pending_requests {
public:
  // Called exactly once: with the reply, or with an empty reply and the reason.
  using completion = std::function<void(std::optional<envelope> reply, const std::string& error)>;

  explicit pending_requests(size_t limit = 65536) : limit_(limit) {}

  // Returns the request id, or nothing when `limit` requests are already waiting (the caller
  // reports the overload instead of queueing without bound).
  std::optional<uint64_t> add(const std::string& peer, steady_time deadline, completion done);
  enum class reply_outcome : uint8_t {
    delivered,
    late,         // the id is unknown (already completed, failed or expired): dropped
    wrong_sender, // the id waits for a reply from another peer: dropped, the request still waits
  };
  // Delivers `reply` from `from` to the request `id` asked of `from`. Ids are small numbers
  // anybody can guess, so the sender is what proves a reply answers the request.
  reply_outcome complete(uint64_t id, const std::string& from, envelope reply);
  // Fails one request (its send failed, so no reply will come); false when it already ended.
  bool fail(uint64_t id, const std::string& reason);
  size_t fail_peer(const std::string& peer, const std::string& reason);
  size_t expire(steady_time now);
  size_t size() const;
  std::optional<steady_time> next_deadline() const;

private:
  struct entry {
    std::string peer;
    steady_time deadline;
    completion done;
  };
  // Removes the request and hands back its completion (empty when it already ended); the caller
  // runs it outside the lock.
  completion take(uint64_t id);
  template<class Pred>
  size_t fail_where(Pred pred, const std::function<std::string(const entry&)>& why);

  mutable std::mutex mutex_;
  size_t limit_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, entry> entries_;
};

} // namespace supernode::transport
