#pragma once
// DeepSeek-V3 routing for one token: sigmoid (or softmax) scores; the correction bias is added
// for *selection only*; groups ranked by the sum of their two best biased scores, the best
// topk_group kept; top-k experts among them; weights are the unbiased scores of the chosen
// experts, normalised to sum 1 (sigmoid) and multiplied by routed_scaling_factor.
// Ties go to the lower index, so routing is a pure function of the logits.

#include <cstdint>
#include <span>

namespace supernode::kernels {

struct moe_gate_params {
  int64_t n_experts = 0;
  int64_t top_k = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool sigmoid = true; // else softmax
  bool normalize = true;
  float routed_scaling_factor = 1.0f;
};

// logits [n_experts] (x · W_gate^T), bias [n_experts] or empty. Writes top_k experts and weights.
void moe_gate(const float* logits, std::span<const float> bias, const moe_gate_params& p,
              int32_t* experts, float* weights);

} // namespace supernode::kernels
