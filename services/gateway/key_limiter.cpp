#include "services/gateway/key_limiter.hpp"

#include <cmath>

namespace supernode::services::gateway {

namespace {
int64_t whole_seconds_up(std::chrono::steady_clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(s)));
}
constexpr double duration_smoothing = 0.2; // weight of the newest request in the mean
} // namespace

key_limiter::lease& key_limiter::lease::operator=(lease&& o) noexcept {
  if (this != &o) {
    end(0);
    owner_ = std::exchange(o.owner_, nullptr);
    started_ = o.started_;
    prompt_tokens_ = o.prompt_tokens_;
  }
  return *this;
}

void key_limiter::lease::end(int64_t generated_tokens, clock::time_point now) {
  if (auto* owner = std::exchange(owner_, nullptr)) owner->release(started_, generated_tokens, now);
}

void key_limiter::lease::refund() {
  if (auto* owner = std::exchange(owner_, nullptr)) owner->refund(started_, prompt_tokens_);
}

std::optional<key_limiter::refusal> key_limiter::try_acquire(int64_t prompt_tokens, lease& out,
                                                             clock::time_point now) {
  std::lock_guard lock(mutex_);
  expire(now);
  if (limits_.max_concurrent > 0 && static_cast<int64_t>(running_.size()) >= limits_.max_concurrent)
    return refusal{{protocol::serving_errc::key_concurrency_limit,
                    "this API key has " + std::to_string(running_.size()) +
                        " requests in flight, its limit (max_concurrent)"},
                   seconds_until_slot_frees(now)};
  if (limits_.tokens_per_minute > 0 && window_tokens_ >= limits_.tokens_per_minute)
    return refusal{{protocol::serving_errc::key_token_rate_limit,
                    "this API key used " + std::to_string(window_tokens_) +
                        " tokens in the last 60 s, its limit is " +
                        std::to_string(limits_.tokens_per_minute) + " (tokens_per_minute)"},
                   seconds_until_admitted(now)};
  running_.insert(now);
  if (prompt_tokens > 0) {
    charges_.push_back({now, prompt_tokens});
    window_tokens_ += prompt_tokens;
  }
  out = lease(this, now, prompt_tokens);
  return std::nullopt;
}

void key_limiter::release(clock::time_point started, int64_t generated_tokens,
                          clock::time_point now) {
  std::lock_guard lock(mutex_);
  if (auto it = running_.find(started); it != running_.end()) running_.erase(it);
  const double took = std::chrono::duration<double>(now - started).count();
  mean_duration_seconds_ =
      mean_duration_seconds_ == 0
          ? took
          : (1 - duration_smoothing) * mean_duration_seconds_ + duration_smoothing * took;
  if (generated_tokens > 0) {
    charges_.push_back({now, generated_tokens});
    window_tokens_ += generated_tokens;
  }
}

void key_limiter::refund(clock::time_point started, int64_t prompt_tokens) {
  std::lock_guard lock(mutex_);
  if (auto it = running_.find(started); it != running_.end()) running_.erase(it);
  if (prompt_tokens <= 0) return;
  // Its charge, unless it already aged out of the window.
  for (auto it = charges_.begin(); it != charges_.end(); ++it)
    if (it->at == started && it->tokens == prompt_tokens) {
      window_tokens_ -= it->tokens;
      charges_.erase(it);
      return;
    }
}

size_t key_limiter::in_flight() const {
  std::lock_guard lock(mutex_);
  return running_.size();
}

int64_t key_limiter::tokens_in_window(clock::time_point now) {
  std::lock_guard lock(mutex_);
  expire(now);
  return window_tokens_;
}

void key_limiter::expire(clock::time_point now) {
  while (!charges_.empty() && charges_.front().at + window <= now) {
    window_tokens_ -= charges_.front().tokens;
    charges_.pop_front();
  }
}

// The window falls below the limit once the oldest charges age out: the first charge whose
// leaving does it says when.
int64_t key_limiter::seconds_until_admitted(clock::time_point now) const {
  int64_t remaining = window_tokens_;
  for (const charge& c : charges_) {
    remaining -= c.tokens;
    if (remaining < limits_.tokens_per_minute) return whole_seconds_up(c.at + window - now);
  }
  return 1;
}

// A slot frees when the oldest request in flight ends; it is expected to take as long as this
// key's requests took on average. Without history (or past the mean) the answer is 1 s.
int64_t key_limiter::seconds_until_slot_frees(clock::time_point now) const {
  if (running_.empty()) return 1;
  const auto age = now - *running_.begin();
  const auto mean = std::chrono::duration_cast<clock::duration>(
      std::chrono::duration<double>(mean_duration_seconds_));
  return mean > age ? whole_seconds_up(mean - age) : 1;
}

} // namespace supernode::services::gateway
