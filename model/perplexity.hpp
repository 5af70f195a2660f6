#pragma once
// Teacher-forced scoring of token sequences with the engine: the summed negative log-likelihood
// of every token after the first, each predicted from the tokens before it in its sequence, over
// the whole vocabulary. `supernode model perplexity` reports exp(nll / tokens).

#include "model/weights.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace supernode::model {

struct sequence_score {
  double nll = 0.0;       // natural log
  int64_t predicted = 0;  // tokens scored
  int64_t top1_right = 0; // of those, how many were the greedy choice
};

// One prefill per sequence; throws std::invalid_argument for a sequence longer than the model's
// context or holding an id outside the vocabulary.
sequence_score score_sequences(std::shared_ptr<const model_weights> weights,
                               std::span<const std::vector<int32_t>> sequences);

} // namespace supernode::model
