#pragma once
// Microbatch pipelining (§4.2.3): a decode step's batch split in two, each microbatch on its own
// thread with its own transformer (the weights are shared), so one microbatch's attention runs
// while the other's MoE (gate, dispatch, experts, combine) runs. The MoE ops take turns, A then
// B at every layer, which keeps the group's collective ops in the order every rank expects;
// everything else overlaps. Rows are independent, so the split changes no token.

#include "model/transformer.hpp"

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace supernode::services {

class microbatch_pipeline {
public:
  // `experts` is the rank's routed_experts (the group); it must run two ops per MoE layer.
  microbatch_pipeline(std::shared_ptr<const model::model_weights> weights,
                      model::routed_experts& experts);
  ~microbatch_pipeline();
  microbatch_pipeline(const microbatch_pipeline&) = delete;
  microbatch_pipeline& operator=(const microbatch_pipeline&) = delete;

  // Same contract as transformer::forward; the first half of the sequences (rounded up) is
  // microbatch A, the rest B (possibly none: B then runs its ops with no tokens).
  void forward(std::span<const int32_t> tokens, std::span<const model::sequence_step> steps,
               model::kv_block_pool& pool, std::vector<float>& hidden);

private:
  // Hands the MoE stream from one microbatch to the other.
  class turn_taking final : public model::routed_experts {
  public:
    turn_taking(microbatch_pipeline& p, int microbatch) : p_(p), mb_(microbatch) {}
    void forward(int64_t layer, const model::moe_weights& w, const float* x, int64_t rows,
                 float* out) override;
    // Microbatch A's forward starts the step's forward for the group.
    void forward_begins() override {
      if (mb_ == 0) p_.experts_.forward_begins();
    }

  private:
    microbatch_pipeline& p_;
    int mb_;
  };

  std::shared_ptr<const model::model_weights> weights_;
  model::routed_experts& experts_;
  turn_taking turn_a_{*this, 0}, turn_b_{*this, 1};
  model::transformer a_, b_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int turn_ = 0;
  bool done_[2] = {false, false};
  std::function<void()> job_b_; // the step's microbatch B, for stream_b_
  bool stopping_ = false;
  std::thread stream_b_;
  std::vector<float> hidden_b_;
};

} // namespace supernode::services
