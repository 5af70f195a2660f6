#pragma once
// `supernode bench model --attention-scores`: what the BF16 attention scores cost in accuracy
// and buy in prefill time, against FP32 scores, on one model. Logits after a prefill are compared
// (max |difference| over the row's max |logit|) beside the difference INT8 weights already make,
// greedy continuations are compared token by token, and prefill is timed with both score paths
// alternately in the one process.

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace supernode::apps {

struct attention_scores_options {
  std::filesystem::path model;
  int64_t prompt_tokens = 512;
  int64_t prompts = 3;
  int32_t generated_tokens = 32;
  int64_t timed_prompt_tokens = 2048;
};

nlohmann::json attention_scores_report(const attention_scores_options& o);

} // namespace supernode::apps
