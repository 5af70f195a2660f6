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
      pool_(model_.kv_layout(options.block_size, false), pool_blocks(options)) {}

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
  auto accept = [&](int64_t i, const float* row_logits) {
    const auto& r = requests[i];
    auto& res = results[i];
    if (static_cast<int32_t>(res.tokens.size()) >= r.max_tokens) {
      done[i] = true;
      res.finish_reason = "length";
      return;
    }
    int32_t tok = kernels::sample(std::span(row_logits, vocab), r.sampling, res.tokens.size());
    res.tokens.push_back(tok);
    next[i] = tok;
    if (const char* why =
            finish_reason_after(tok, static_cast<int64_t>(res.tokens.size()), r.max_tokens,
                                r.stop_at_eos, weights_->config.eos_token_id)) {
      done[i] = true;
      res.finish_reason = why;
    }
  };
  for (int64_t i = 0; i < n; ++i) accept(i, logits.data() + i * vocab);
  const double prefill_ms = ms_since(t0);

  // Decode: every unfinished sequence contributes one token per step.
  auto t1 = clock_type::now();
  int64_t decode_steps = 0;
  std::vector<int64_t> active;
  for (;;) {
    active.clear();
    tokens.clear();
    steps.clear();
    for (int64_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      active.push_back(i);
      tokens.push_back(next[i]);
      const int64_t pos = tables[i].tokens();
      steps.push_back({&tables[i], pos, 1, attention_mode::decode});
      tables[i].set_tokens(pos + 1);
    }
    if (active.empty()) break;
    model_.forward(tokens, steps, pool_, hidden);
    model_.logits(hidden.data(), static_cast<int64_t>(active.size()), logits);
    for (size_t a = 0; a < active.size(); ++a) accept(active[a], logits.data() + a * vocab);
    ++decode_steps;
  }
  const double decode_ms = ms_since(t1);
  for (auto& res : results) {
    res.prefill_ms = prefill_ms;
    res.decode_ms_per_token = decode_steps > 0 ? decode_ms / decode_steps : 0.0;
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
