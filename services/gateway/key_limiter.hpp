#pragma once
// The limits of one API key: requests in flight (max_concurrent) and tokens per minute, counted
// over a sliding 60-second window of charges (prompt tokens when a request is admitted, its
// generated tokens when it ends). A request is admitted while the window holds fewer tokens
// than the limit; what it then adds may take the window over, and the next request waits until
// enough charges have aged out. Thread-safe; the caller passes the time, so tests need no clock.

#include "services/gateway/api_keys.hpp"
#include "services/protocol/error_codes.hpp"

#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace supernode::services::gateway {

class key_limiter {
public:
  using clock = std::chrono::steady_clock;
  static constexpr auto window = std::chrono::seconds(60);

  struct refusal {
    protocol::error why;
    int64_t retry_after_seconds = 1; // Retry-After: when a retry can be admitted, rounded up
  };

  explicit key_limiter(api_key_limits limits) : limits_(limits) {}

  // A request's hold on the key: ends (giving back its slot and charging its generated tokens)
  // when end() is called or the lease is destroyed.
  class lease {
  public:
    lease() = default;
    lease(key_limiter* owner, clock::time_point started, int64_t prompt_tokens)
        : owner_(owner), started_(started), prompt_tokens_(prompt_tokens) {}
    lease(lease&& o) noexcept { *this = std::move(o); }
    lease& operator=(lease&& o) noexcept;
    ~lease() { end(0); }
    void end(int64_t generated_tokens, clock::time_point now = clock::now());
    // The request was refused after all (the gateway full, no scheduler): its slot back and its
    // prompt uncharged, as if it never came.
    void refund();
    explicit operator bool() const { return owner_ != nullptr; }

  private:
    key_limiter* owner_ = nullptr;
    clock::time_point started_;
    int64_t prompt_tokens_ = 0;
  };

  // Admits a request of `prompt_tokens` (charged now), or says why not and when to retry.
  std::optional<refusal> try_acquire(int64_t prompt_tokens, lease& out,
                                     clock::time_point now = clock::now());

  size_t in_flight() const;
  int64_t tokens_in_window(clock::time_point now = clock::now());

private:
  void release(clock::time_point started, int64_t generated_tokens, clock::time_point now);
  void refund(clock::time_point started, int64_t prompt_tokens);
  void expire(clock::time_point now); // drops charges older than the window
  int64_t seconds_until_admitted(clock::time_point now) const;
  int64_t seconds_until_slot_frees(clock::time_point now) const;

  const api_key_limits limits_;
  mutable std::mutex mutex_;
  std::multiset<clock::time_point> running_; // start times of the requests in flight
  // Smoothed duration of this key's finished requests: the estimate of when a slot frees.
  double mean_duration_seconds_ = 0;
  struct charge {
    clock::time_point at;
    int64_t tokens;
  };
  std::deque<charge> charges_; // oldest first
  int64_t window_tokens_ = 0;  // sum of charges_
};

} // namespace supernode::services::gateway
