#include "model/engine.hpp"

#include <chrono>
#include <stdexcept>

namespace supernode::model {

namespace {
using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

int64_t pool_blocks(const engine_options& o) {
  if (o.block_size <= 0) throw std::invalid_argument("block_size must be positive");
  return o.kv_blocks > 0 ? o.kv_blocks : (o.max_context + o.block_size - 1) / o.block_size;
}
} // namespace

const char* finish_reason_after(int32_t token, int64_t generated, int32_t max_tokens,
                                bool stop_at_eos, int64_t eos_token_id) {
  if (stop_at_eos && token == eos_token_id) return "stop";
  if (generated >= max_tokens) return "length";
  return nullptr;
}

reference_engine::reference_engine(std::shared_ptr<const model_weights> weights,
                                   engine_options options)
    : weights_(weights), options_(options), model_(weights),
      pool_(model_.kv_layout(options.block_size, options.mtp_drafts > 0), pool_blocks(options)),
      stepper_(model_) {
  if (options.mtp_drafts < 0)
    throw std::invalid_argument("mtp_drafts must not be negative, got " +
                                std::to_string(options.mtp_drafts));
  if (options.mtp_drafts > 0 && weights->mtp.empty())
    throw std::invalid_argument("MTP drafts asked for, but the weights have no MTP module loaded "
                                "(the model has none, or it was loaded without)");
  if (options.mtp_drafts > 0)
    stepper_.set_draft_vocabulary(options.mtp_draft_vocab, options.mtp_draft_vocab_file);
}

void reference_engine::validate(const generation_request& r) const {
  if (r.prompt.empty()) throw std::invalid_argument("prompt is empty");
  if (r.max_tokens < 0)
    throw std::invalid_argument("max_tokens must not be negative, got " +
                                std::to_string(r.max_tokens));
  const int64_t limit =
      std::min<int64_t>(options_.max_context, weights_->config.max_position_embeddings);
  if (static_cast<int64_t>(r.prompt.size()) + r.max_tokens > limit)
    throw std::invalid_argument("prompt (" + std::to_string(r.prompt.size()) +
                                " tokens) plus max_tokens (" + std::to_string(r.max_tokens) +
                                ") exceeds the context limit of " + std::to_string(limit));
  if (r.sampling.temperature < 0.0f || !(r.sampling.top_p > 0.0f && r.sampling.top_p <= 1.0f) ||
      r.sampling.top_k < 0)
    throw std::invalid_argument("sampling parameters out of range (temperature >= 0, "
                                "0 < top_p <= 1, top_k >= 0)");
  const int64_t vocab = weights_->config.vocab_size;
  for (auto t : r.prompt)
    if (t < 0 || t >= vocab)
      throw std::invalid_argument("prompt token " + std::to_string(t) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
}

generation_result reference_engine::generate(const generation_request& request) {
  return generate_batch(std::span(&request, 1)).front();
}

std::vector<generation_result>
reference_engine::generate_batch(std::span<const generation_request> requests) {
  for (auto& r : requests) validate(r);
  const int64_t n = static_cast<int64_t>(requests.size());
  const int64_t vocab = weights_->config.vocab_size;
  std::vector<generation_result> results(n);
  std::vector<kv_block_table> tables(n);
  kv_tables_guard guard(pool_, tables);

  // Prefill: all prompts packed into one step.
  auto t0 = clock_type::now();
  std::vector<int32_t> tokens;
  std::vector<sequence_step> steps;
  for (int64_t i = 0; i < n; ++i) {
    const auto& r = requests[i];
    tables[i].reserve(pool_, static_cast<int64_t>(r.prompt.size()) + r.max_tokens);
    tables[i].set_tokens(static_cast<int64_t>(r.prompt.size()));
    steps.push_back(
        {&tables[i], 0, static_cast<int64_t>(r.prompt.size()), attention_mode::prefill});
    tokens.insert(tokens.end(), r.prompt.begin(), r.prompt.end());
  }
  std::vector<float> hidden, logits, last_rows;
  model_.forward(tokens, steps, pool_, hidden);
  const bool mtp = options_.mtp_drafts > 0;
  if (mtp) {
    std::vector<mtp_prefill_chunk> chunks;
    for (int64_t i = 0; i < n; ++i)
      chunks.push_back({&tables[i], requests[i].prompt, 0, steps[i].n_tokens});
    mtp_prefill(model_, chunks, hidden.data(), pool_);
  }
  const int64_t h = weights_->config.hidden_size;
  last_rows.resize(n * h);
  int64_t row = 0;
  for (int64_t i = 0; i < n; ++i) {
    row += static_cast<int64_t>(requests[i].prompt.size());
    std::copy_n(hidden.data() + (row - 1) * h, h, last_rows.data() + i * h);
  }
  model_.logits(last_rows.data(), n, logits);

  std::vector<int32_t> next(n);
  std::vector<bool> done(n, false);
  // Appends `tok` to request i's tokens; false once the request is done.
  auto accept = [&](int64_t i, int32_t tok) {
    const auto& r = requests[i];
    auto& res = results[i];
    res.tokens.push_back(tok);
    next[i] = tok;
    if (const char* why =
            finish_reason_after(tok, static_cast<int64_t>(res.tokens.size()), r.max_tokens,
                                r.stop_at_eos, weights_->config.eos_token_id)) {
      done[i] = true;
      res.finish_reason = why;
    }
    return !done[i];
  };
  std::vector<mtp_state> drafters(mtp ? n : 0);
  for (int64_t i = 0; i < n; ++i) {
    if (requests[i].max_tokens == 0) {
      done[i] = true;
      results[i].finish_reason = "length";
      continue;
    }
    accept(i,
           kernels::sample(std::span(logits.data() + i * vocab, vocab), requests[i].sampling, 0));
    if (mtp)
      drafters[i] = mtp_state_after_prefill(steps[i].n_tokens,
                                            std::span(last_rows.data() + i * h, h), next[i]);
  }
  const double prefill_ms = ms_since(t0);

  // Decode: every unfinished sequence feeds its latest token (and its drafts) per step.
  auto t1 = clock_type::now();
  std::vector<int64_t> active;
  std::vector<decode_sequence_step> step_of;
  std::vector<decode_sequence_outcome> outcomes;
  for (;;) {
    active.clear();
    step_of.clear();
    for (int64_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      active.push_back(i);
      const auto& r = requests[i];
      const auto generated = static_cast<int64_t>(results[i].tokens.size());
      step_of.push_back({&tables[i], std::span(&next[i], 1), mtp ? &drafters[i] : nullptr,
                         std::min(options_.mtp_drafts, r.max_tokens - generated - 1), r.sampling,
                         static_cast<uint64_t>(generated), options_.mtp_acceptance});
    }
    if (active.empty()) break;
    stepper_.step(step_of, pool_, outcomes);
    for (size_t a = 0; a < active.size(); ++a) {
      auto& res = results[active[a]];
      res.drafted_tokens += outcomes[a].drafted;
      res.accepted_tokens += outcomes[a].accepted();
      for (int32_t tok : outcomes[a].tokens)
        if (!accept(active[a], tok)) break;
    }
  }
  const double decode_ms = ms_since(t1);
  for (auto& res : results) {
    res.prefill_ms = prefill_ms;
    const auto decoded = static_cast<int64_t>(res.tokens.size()) - 1;
    res.decode_ms_per_token = decoded > 0 ? decode_ms / static_cast<double>(decoded) : 0.0;
  }
  return results;
}

std::vector<float> reference_engine::prompt_logits(std::span<const int32_t> prompt) {
  generation_request r;
  r.prompt.assign(prompt.begin(), prompt.end());
  r.max_tokens = 0;
  validate(r);
  kv_block_table table;
  kv_tables_guard guard(pool_, std::span(&table, 1));
  table.reserve(pool_, static_cast<int64_t>(prompt.size()));
  std::vector<sequence_step> steps{
      {&table, 0, static_cast<int64_t>(prompt.size()), attention_mode::prefill}};
  std::vector<float> hidden, logits;
  model_.forward(prompt, steps, pool_, hidden);
  const int64_t h = weights_->config.hidden_size;
  model_.logits(hidden.data() + (prompt.size() - 1) * h, 1, logits);
  return logits;
}

} // namespace supernode::model
