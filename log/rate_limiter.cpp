#include "log/rate_limiter.hpp"

#include "log/log.hpp"

namespace supernode::log {

rate_limiter::rate_limiter(clock::duration interval, now_fn now)
    : interval_(interval), now_(std::move(now)) {}

rate_limiter::rate_limiter() : rate_limiter(default_rate_interval()) {}

rate_limiter::verdict rate_limiter::admit(std::string_view reason) {
  const auto now = now_();
  std::lock_guard lock(mutex_);
  auto it = entries_.find(reason);
  if (it == entries_.end()) {
    if (entries_.size() >= max_reasons) forget_idle(now);
    if (entries_.size() >= max_reasons) it = entries_.find(overflow_reason);
    if (it == entries_.end()) {
      entries_.emplace(entries_.size() >= max_reasons ? overflow_reason : reason, entry{now, 0});
      return {true, 0, {}};
    }
  }
  entry& e = it->second;
  if (now - e.last_line < interval_) {
    ++e.suppressed;
    return {};
  }
  verdict v{true, e.suppressed, now - e.last_line};
  e = {now, 0};
  return v;
}

void rate_limiter::forget_idle(clock::time_point now) {
  std::erase_if(entries_, [&](const auto& kv) {
    return kv.second.suppressed == 0 && now - kv.second.last_line >= interval_;
  });
}

} // namespace supernode::log
