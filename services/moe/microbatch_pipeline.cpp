#include "services/moe/microbatch_pipeline.hpp"

#include <exception>
#include <thread>

namespace supernode::services {

microbatch_pipeline::microbatch_pipeline(std::shared_ptr<const model::model_weights> weights,
                                         model::routed_experts& experts)
    : weights_(weights), experts_(experts), a_(weights), b_(weights) {
  a_.set_routed_experts(&turn_a_);
  b_.set_routed_experts(&turn_b_);
  // Microbatch B's stream: one thread for the pipeline's life, not one per step.
  stream_b_ = std::thread([this] {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || job_b_; });
        if (stopping_) return;
        job = std::move(job_b_);
        job_b_ = nullptr;
      }
      job();
    }
  });
}

microbatch_pipeline::~microbatch_pipeline() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  stream_b_.join();
}

void microbatch_pipeline::turn_taking::forward(int64_t layer, const model::moe_weights& w,
                                               const float* x, int64_t rows, float* out) {
  {
    std::unique_lock lock(p_.mutex_);
    // A microbatch that has ended (or failed) takes no more turns: never wait for it.
    p_.changed_.wait(lock, [&] { return p_.turn_ == mb_ || p_.done_[1 - mb_]; });
  }
  auto pass = [&] {
    std::lock_guard lock(p_.mutex_);
    p_.turn_ = 1 - mb_;
    p_.changed_.notify_all();
  };
  try {
    p_.experts_.forward(layer, w, x, rows, out);
  } catch (...) {
    pass(); // the other microbatch then fails on the broken group instead of waiting here
    throw;
  }
  pass();
}

void microbatch_pipeline::forward(std::span<const int32_t> tokens,
                                  std::span<const model::sequence_step> steps,
                                  model::kv_block_pool& pool, std::vector<float>& hidden) {
  const size_t split = (steps.size() + 1) / 2;
  size_t tokens_a = 0;
  for (size_t i = 0; i < split; ++i) tokens_a += static_cast<size_t>(steps[i].n_tokens);
  turn_ = 0;
  done_[0] = done_[1] = false;
  auto finished = [&](int mb) {
    std::lock_guard lock(mutex_);
    done_[mb] = true;
    changed_.notify_all();
  };
  std::exception_ptr b_error;
  auto run_b = [&] {
    try {
      if (split < steps.size()) {
        b_.forward(tokens.subspan(tokens_a), steps.subspan(split), pool, hidden_b_);
      } else {
        hidden_b_.clear();
        // No sequence for B: its ops still run, with no tokens, so every rank sees two per layer.
        for (auto& layer : weights_->layers)
          if (layer.is_moe)
            turn_b_.forward(&layer - weights_->layers.data(), layer.moe, nullptr, 0, nullptr);
      }
    } catch (...) {
      b_error = std::current_exception();
    }
    finished(1);
  };
  {
    std::lock_guard lock(mutex_);
    job_b_ = run_b;
  }
  changed_.notify_all();
  std::exception_ptr a_error;
  try {
    a_.forward(tokens.first(tokens_a), steps.first(split), pool, hidden);
  } catch (...) {
    a_error = std::current_exception();
  }
  finished(0);
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return done_[1]; });
  }
  if (a_error) std::rethrow_exception(a_error);
  if (b_error) std::rethrow_exception(b_error);
  hidden.insert(hidden.end(), hidden_b_.begin(), hidden_b_.end());
}

} // namespace supernode::services
