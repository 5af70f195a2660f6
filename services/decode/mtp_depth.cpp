#include "services/decode/mtp_depth.hpp"

#include <algorithm>

namespace supernode::services {

namespace {
constexpr double forget = 0.98;        // per sequence or step recorded: figures follow the load
constexpr double average_weight = 0.2; // of a new step time in its average
constexpr uint64_t explore_every = 16; // one step in this many tries another depth
} // namespace

mtp_depth_policy::mtp_depth_policy(int64_t max_drafts, bool adaptive)
    : max_(std::max<int64_t>(0, max_drafts)), adaptive_(adaptive), reached_(max_, 0.0),
      accepted_(max_, 0.0) {}

double mtp_depth_policy::acceptance(int64_t position) const {
  if (position < 0 || position >= max_) return 0.0;
  // Until measured, assume the paper's ~70 % so drafting gets tried.
  return reached_[position] > 0.5 ? accepted_[position] / reached_[position] : 0.7;
}

double mtp_depth_policy::expected_tokens(int64_t depth) const {
  double tokens = 1.0, reach = 1.0;
  for (int64_t j = 0; j < std::min(depth, max_); ++j) {
    reach *= acceptance(j);
    tokens += reach;
  }
  return tokens;
}

int64_t mtp_depth_policy::bucket(int64_t batch) {
  if (batch <= 8) return batch;
  int64_t b = 8;
  while (b < batch) b *= 2;
  return b;
}

double mtp_depth_policy::predicted_seconds(int64_t batch, int64_t depth) const {
  const auto it = seconds_.find({bucket(batch), depth});
  return it == seconds_.end() ? 0.0 : it->second;
}

int64_t mtp_depth_policy::depth(int64_t batch) {
  if (max_ == 0) return 0;
  if (!adaptive_) return max_;
  ++steps_;
  int64_t best = 0;
  double best_rate = 0.0;
  for (int64_t k = 0; k <= max_; ++k) {
    const double seconds = predicted_seconds(batch, k);
    if (seconds <= 0.0) return k; // not measured at this batch yet: try it
    const double rate = expected_tokens(k) / seconds;
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  if (steps_ % explore_every == 0)
    return (best + 1 + static_cast<int64_t>(steps_ / explore_every) % max_) % (max_ + 1);
  return best;
}

void mtp_depth_policy::record_step(int64_t batch, int64_t depth, double seconds) {
  if (max_ == 0 || batch <= 0 || depth < 0 || depth > max_) return;
  auto [it, fresh] = seconds_.try_emplace({bucket(batch), depth}, seconds);
  if (!fresh) it->second += average_weight * (seconds - it->second);
}

void mtp_depth_policy::record_sequence(int64_t drafted, int64_t accepted) {
  // Draft j was verified when every draft before it was accepted.
  for (int64_t j = 0; j < std::min(drafted, max_) && j <= accepted; ++j) {
    reached_[j] = reached_[j] * forget + 1.0;
    accepted_[j] = accepted_[j] * forget + (j < accepted ? 1.0 : 0.0);
  }
}

} // namespace supernode::services
