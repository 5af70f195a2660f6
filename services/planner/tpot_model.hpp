#pragma once
// TPOT as a function of the decode batch, learned from what the cluster measures: the paper's
// TPOT-constrained batching (§4.2.4, Table 5). A larger batch raises a decode instance's
// throughput, but every step reads the KV of every sequence in it, so the time per output token
// grows with the batch too; past some size the TPOT target is missed. A step's cost is close to
// a fixed part (weights, launch) plus a part per sequence (its KV and its rows of the GEMMs), so
// a least-squares line tpot = a + b * batch over recent (batch, TPOT p90) pairs predicts it well
// enough, and the largest batch on the line at or under the target is the cap.

#include <cstddef>
#include <deque>
#include <optional>

namespace supernode::services::planner {

struct tpot_line {
  double fixed_ms = 0;   // a: TPOT of an empty batch
  double per_seq_ms = 0; // b: what each sequence adds
  double at(double batch) const { return fixed_ms + per_seq_ms * batch; }
};

class tpot_model {
public:
  // Keeps the most recent `capacity` pairs, so the line follows a changed workload (longer
  // contexts make each sequence dearer).
  explicit tpot_model(size_t capacity = 64) : capacity_(capacity) {}

  // One measurement: the mean sequences per decode instance and the TPOT p90 they ran at.
  void add(double batch, double tpot_ms);

  // The least-squares line, once the pairs span batches at least one sequence apart (a slope
  // needs two distinct batches; closer ones make it noise).
  std::optional<tpot_line> fit() const;

  // The largest batch in [1, max_batch] whose predicted TPOT is at most target_ms: max_batch
  // when the line does not grow with the batch (capping would not help), 1 when even one
  // sequence is predicted over the target. Nothing before fit() has a line.
  std::optional<int> cap_for(double target_ms, int max_batch) const;

  size_t size() const { return pairs_.size(); }

private:
  struct pair {
    double batch, tpot_ms;
  };
  size_t capacity_;
  std::deque<pair> pairs_;
};

} // namespace supernode::services::planner
