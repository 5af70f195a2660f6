#include "apps/bench/attention_scores_bench.hpp"

#include "apps/bench/model_bench.hpp"
#include "kernels/attention.hpp"
#include "model/engine.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace supernode::apps {

namespace {

using kernels::attention_scores;
using weights_ptr = std::shared_ptr<const model::model_weights>;

// Runs fn with the given attention scores, restoring FP32 afterwards.
template<class Fn>
auto with_scores(attention_scores s, Fn fn) {
  kernels::set_attention_scores(s);
  struct restore {
    ~restore() { kernels::set_attention_scores(attention_scores::fp32); }
  } r;
  return fn();
}

weights_ptr load(const std::filesystem::path& dir, model::precision p) {
  model::load_options lo;
  lo.prec = p;
  lo.load_mtp = false;
  return model::model_weights::load(dir, lo);
}

// max |a - b| over max |reference|: the error in units of the row's largest logit.
nlohmann::json logit_difference(const std::vector<float>& reference, const std::vector<float>& b) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    diff = std::max(diff, double(std::fabs(reference[i] - b[i])));
    mag = std::max(mag, double(std::fabs(reference[i])));
  }
  const auto argmax = [](const std::vector<float>& v) {
    return std::max_element(v.begin(), v.end()) - v.begin();
  };
  return {{"max_abs_difference", diff},
          {"row_max_abs", mag},
          {"relative", diff / mag},
          {"same_argmax", argmax(reference) == argmax(b)}};
}

// Greedy continuations with FP32 and BF16 scores: equal, or where they first part.
nlohmann::json greedy_agreement(model::reference_engine& engine, const std::vector<int32_t>& prompt,
                                int32_t tokens) {
  model::generation_request r;
  r.prompt = prompt;
  r.max_tokens = tokens;
  r.stop_at_eos = false;
  const auto fp32 = engine.generate(r).tokens;
  const auto bf16 = with_scores(attention_scores::bf16, [&] { return engine.generate(r).tokens; });
  const auto first =
      std::mismatch(fp32.begin(), fp32.end(), bf16.begin(), bf16.end()).first - fp32.begin();
  return {{"tokens", fp32.size()},
          {"identical", fp32 == bf16},
          {"first_difference", fp32 == bf16 ? -1 : first}};
}

double prefill_seconds(model::reference_engine& engine, const std::vector<int32_t>& prompt) {
  const auto t0 = std::chrono::steady_clock::now();
  engine.prompt_logits(prompt);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

nlohmann::json attention_scores_report(const attention_scores_options& o) {
  if (!kernels::attention_bf16_supported())
    throw std::runtime_error("bench model --attention-scores: this CPU has no AVX-512 BF16");
  const auto fp32_weights = load(o.model, model::precision::fp32);
  const auto int8_weights = load(o.model, model::precision::int8);
  const auto& c = fp32_weights->config;
  model::engine_options eo;
  eo.max_context = std::max(o.prompt_tokens + o.generated_tokens, o.timed_prompt_tokens) + 16;
  model::reference_engine fp32_engine(fp32_weights, eo), int8_engine(int8_weights, eo);

  nlohmann::json out;
  out["model"] = o.model.string();
  for (int64_t p = 0; p < o.prompts; ++p) {
    const auto prompt = synthetic_prompt(o.prompt_tokens, c.vocab_size, 100 + p);
    const auto reference = fp32_engine.prompt_logits(prompt);
    const auto bf16 =
        with_scores(attention_scores::bf16, [&] { return fp32_engine.prompt_logits(prompt); });
    const auto int8 = int8_engine.prompt_logits(prompt);
    const auto int8_bf16 =
        with_scores(attention_scores::bf16, [&] { return int8_engine.prompt_logits(prompt); });
    out["prompts"].push_back(
        {{"prompt_tokens", o.prompt_tokens},
         {"fp32_weights_bf16_scores_vs_fp32", logit_difference(reference, bf16)},
         {"int8_weights_vs_fp32_weights", logit_difference(reference, int8)},
         {"int8_weights_bf16_scores_vs_fp32_scores", logit_difference(int8, int8_bf16)},
         {"greedy_fp32_weights", greedy_agreement(fp32_engine, prompt, o.generated_tokens)},
         {"greedy_int8_weights", greedy_agreement(int8_engine, prompt, o.generated_tokens)}});
  }
  // Alternate the two paths so both see the same machine load; keep each one's best.
  const auto timed = synthetic_prompt(o.timed_prompt_tokens, c.vocab_size, 7);
  double fp32_s = 1e30, bf16_s = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    fp32_s = std::min(fp32_s, prefill_seconds(int8_engine, timed));
    bf16_s = std::min(bf16_s, with_scores(attention_scores::bf16,
                                          [&] { return prefill_seconds(int8_engine, timed); }));
  }
  out["prefill_int8_weights"] = {{"prompt_tokens", o.timed_prompt_tokens},
                                 {"fp32_scores_tokens_per_s", o.timed_prompt_tokens / fp32_s},
                                 {"bf16_scores_tokens_per_s", o.timed_prompt_tokens / bf16_s},
                                 {"bf16_over_fp32", fp32_s / bf16_s}};
  return out;
}

} // namespace supernode::apps
