#include "services/gateway/latency_window.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace supernode::services::gateway {

void latency_window::add(series& s, clock::time_point at, double ms) {
  s.emplace_back(at, ms);
  while (!s.empty() && (s.size() > max_entries_ || s.front().first < at - keep_)) s.pop_front();
}

void latency_window::add_ttft(clock::time_point at, double ms) {
  std::lock_guard lock(mutex_);
  add(ttft_, at, ms);
}

void latency_window::add_tpot(clock::time_point at, double ms) {
  std::lock_guard lock(mutex_);
  add(tpot_, at, ms);
}

std::optional<double> latency_window::p90(const series& s, clock::time_point since) {
  std::vector<double> values;
  for (auto it = s.rbegin(); it != s.rend() && it->first >= since; ++it)
    values.push_back(it->second);
  if (values.empty()) return std::nullopt;
  // Nearest rank: the smallest value at or above 90 % of the values.
  const auto rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(values.size())));
  std::nth_element(values.begin(), values.begin() + (rank - 1), values.end());
  return values[rank - 1];
}

latency_window::p90s latency_window::p90_since(clock::time_point since) const {
  std::lock_guard lock(mutex_);
  return {p90(ttft_, since), p90(tpot_, since)};
}

} // namespace supernode::services::gateway
