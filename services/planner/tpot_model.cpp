#include "services/planner/tpot_model.hpp"

#include <algorithm>
#include <cmath>

namespace supernode::services::planner {

void tpot_model::add(double batch, double tpot_ms) {
  if (!(batch > 0) || !std::isfinite(tpot_ms)) return;
  pairs_.push_back({batch, tpot_ms});
  while (pairs_.size() > capacity_) pairs_.pop_front();
}

std::optional<tpot_line> tpot_model::fit() const {
  if (pairs_.size() < 2) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(
      pairs_.begin(), pairs_.end(), [](const pair& x, const pair& y) { return x.batch < y.batch; });
  if (hi->batch - lo->batch < 1.0) return std::nullopt;
  double mean_x = 0, mean_y = 0;
  for (const auto& p : pairs_) mean_x += p.batch, mean_y += p.tpot_ms;
  mean_x /= static_cast<double>(pairs_.size());
  mean_y /= static_cast<double>(pairs_.size());
  double sxy = 0, sxx = 0;
  for (const auto& p : pairs_) {
    sxy += (p.batch - mean_x) * (p.tpot_ms - mean_y);
    sxx += (p.batch - mean_x) * (p.batch - mean_x);
  }
  const double slope = sxy / sxx;
  return tpot_line{mean_y - slope * mean_x, slope};
}

std::optional<int> tpot_model::cap_for(double target_ms, int max_batch) const {
  const auto line = fit();
  if (!line) return std::nullopt;
  if (line->per_seq_ms <= 0) return max_batch;
  // The epsilon keeps a batch exactly on the target (up to rounding in the fit) inside.
  const double largest = std::floor((target_ms - line->fixed_ms) / line->per_seq_ms + 1e-9);
  return static_cast<int>(std::clamp(largest, 1.0, static_cast<double>(max_batch)));
}

} // namespace supernode::services::planner
