#pragma once
// How many tokens a decode step drafts with MTP ([decode] mtp, mtp_adaptive). A step of b
// sequences drafting k each verifies b(1 + k) positions and runs the MTP module k times; it
// yields E(k) = 1 + α₀ + α₀α₁ + … tokens per sequence, αⱼ being the measured rate at which the
// j-th draft is accepted once reached. The depth chosen maximises E(k) / T(b, k): at a given
// batch that is both the most tokens per second and the lowest time per output token, so the
// planner, which sizes the batch cap from the TPOT it measures (docs/planner.md), sees the TPOT
// this depth gives and raises or lowers the batch accordingly; with a large batch the
// verification's extra rows cost more than the accepted drafts save and the depth falls to 0.
// T(b, k) is the measured step time, a moving average per depth and batch bucket (exact up to 8
// sequences, then powers of two); a depth not yet measured at a bucket is tried first, and every
// `explore_every`-th step tries another one, so the figures follow the load. No threads: the
// decode instance's compute thread owns it.

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace supernode::services {

class mtp_depth_policy {
public:
  mtp_depth_policy(int64_t max_drafts, bool adaptive);

  // Drafts per sequence for the next step of `batch` sequences.
  int64_t depth(int64_t batch);
  // A step of `batch` sequences given `depth` drafts each took `seconds`. `drafted`/`accepted`
  // per sequence come through record_sequence.
  void record_step(int64_t batch, int64_t depth, double seconds);
  void record_sequence(int64_t drafted, int64_t accepted);

  int64_t max_drafts() const { return max_; }
  // The predicted tokens per sequence-step and step seconds (0: not measured) at this depth.
  double expected_tokens(int64_t depth) const;
  double predicted_seconds(int64_t batch, int64_t depth) const;
  double acceptance(int64_t position) const;

private:
  static int64_t bucket(int64_t batch);

  int64_t max_;
  bool adaptive_;
  uint64_t steps_ = 0;
  // Acceptance per draft position, as decayed counts.
  std::vector<double> reached_, accepted_;
  std::map<std::pair<int64_t, int64_t>, double> seconds_; // (bucket, depth) -> average
};

} // namespace supernode::services
