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

// A uniform double in [0, 1) from (seed, step): the counter-based stream above.
double uniform_from(uint64_t seed, uint64_t step);

} // namespace supernode::kernels
