#include "services/prefill/prefill_engine.hpp"

#include "kernels/sampling.hpp"

#include <algorithm>
#include <stdexcept>

namespace supernode::services {

std::vector<prefill_chunk> pack_prefill(std::span<prefill_job* const> jobs, int64_t token_budget) {
  std::vector<prefill_chunk> chunks;
  int64_t left = token_budget;
  for (size_t i = 0; i < jobs.size() && left > 0; ++i) {
    const int64_t n = std::min(jobs[i]->remaining(), left);
    if (n <= 0) continue;
    chunks.push_back({i, jobs[i]->done, n});
    left -= n;
  }
  return chunks;
}

prefill_engine::prefill_engine(model::transformer& model, int64_t token_budget, bool with_mtp)
    : model_(model), budget_(token_budget), with_mtp_(with_mtp) {
  if (token_budget <= 0) throw std::invalid_argument("prefill token budget must be positive");
  if (with_mtp && model.weights().mtp.empty())
    throw std::invalid_argument("prefill with MTP, but the weights have no MTP module loaded");
}

std::vector<prefill_output> prefill_engine::step(std::span<prefill_job* const> jobs,
                                                 model::kv_block_pool& pool) {
  const auto chunks = pack_prefill(jobs, budget_);
  if (chunks.empty()) return {};
  tokens_.clear();
  steps_.clear();
  for (auto& c : chunks) {
    auto& job = *jobs[c.job];
    const auto& prompt = job.spec.prompt;
    tokens_.insert(tokens_.end(), prompt.begin() + c.first_pos,
                   prompt.begin() + c.first_pos + c.n_tokens);
    job.table->set_tokens(c.first_pos + c.n_tokens);
    steps_.push_back({job.table, c.first_pos, c.n_tokens, model::attention_mode::prefill});
  }
  model_.forward(tokens_, steps_, pool, hidden_);
  if (with_mtp_) {
    std::vector<model::mtp_prefill_chunk> mtp_chunks;
    for (size_t i = 0; i < chunks.size(); ++i)
      mtp_chunks.push_back({steps_[i].table, jobs[chunks[i].job]->spec.prompt, chunks[i].first_pos,
                            chunks[i].n_tokens});
    model::mtp_prefill(model_, mtp_chunks, hidden_.data(), pool);
  }

  // Only the last row of a completed prompt needs logits.
  const int64_t h = model_.config().hidden_size;
  std::vector<prefill_output> out;
  last_rows_.clear();
  int64_t row = 0;
  for (auto& c : chunks) {
    auto& job = *jobs[c.job];
    row += c.n_tokens;
    job.done += c.n_tokens;
    if (job.remaining() == 0) {
      last_rows_.insert(last_rows_.end(), hidden_.begin() + (row - 1) * h,
                        hidden_.begin() + row * h);
      out.push_back({&job, 0, {}});
    }
  }
  if (out.empty()) return out;
  model_.logits(last_rows_.data(), static_cast<int64_t>(out.size()), logits_);
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < out.size(); ++i) {
    const auto& s = out[i].job->spec;
    const kernels::sampling_params params{s.temperature, s.top_p, s.top_k, s.seed};
    out[i].first_token = kernels::sample(std::span(logits_.data() + i * vocab, vocab), params, 0);
    if (with_mtp_)
      out[i].mtp = model::mtp_state_after_prefill(static_cast<int64_t>(s.prompt.size()),
                                                  std::span(last_rows_.data() + i * h, h),
                                                  out[i].first_token);
  }
  return out;
}

} // namespace supernode::services
