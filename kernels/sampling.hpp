#pragma once
// Token sampling. Greedy is argmax with ties to the lower id. Random sampling draws from a
// counter-based stream keyed by (seed, step), so a request's tokens never depend on which
// other requests shared its batch or on which instance ran it.

#include <cstdint>
#include <span>

namespace supernode::kernels {

struct sampling_params {
  float temperature = 0.0f; // 0: greedy
  float top_p = 1.0f;       // (0, 1]
  int32_t top_k = 0;        // 0: off
  uint64_t seed = 0;
};

int32_t argmax(std::span<const float> logits);

// `step` is the index of the token being generated within its request.
int32_t sample(std::span<const float> logits, const sampling_params& p, uint64_t step);

// The distribution sample() draws from (one-hot at the argmax when greedy), into `out`
// [vocab].
void sampling_probabilities(std::span<const float> logits, const sampling_params& p,
                            std::span<float> out);

// Speculative sampling. A draft token is drawn from the draft model's distribution q (its
// logits under the request's sampling parameters, written to `draft_probabilities` [vocab]
// unless greedy, when nothing is written and the span may be empty) on a
// stream of its own; verify_draft then accepts it with probability min(1, p/q) against the
// target model's distribution p, or draws the replacement from max(0, p - q) normalised, so
// each emitted token is distributed exactly as sample() would draw it. Greedy: the draft is
// the draft argmax, accepted exactly when it is the target argmax, which is then the token.
int32_t sample_draft(std::span<const float> draft_logits, const sampling_params& p, uint64_t step,
                     std::span<float> draft_probabilities);
struct speculative_choice {
  int32_t token = 0;     // the token emitted at this position
  bool accepted = false; // it is the draft: the next draft is verified too
};
speculative_choice verify_draft(std::span<const float> target_logits,
                                std::span<const float> draft_probabilities, int32_t draft,
                                const sampling_params& p, uint64_t step);

// A uniform double in [0, 1) from (seed, step): the counter-based stream above.
double uniform_from(uint64_t seed, uint64_t step);

} // namespace supernode::kernels
