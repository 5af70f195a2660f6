#pragma once
// Synthetic MoE routing with the skew real gates show: a few experts draw most tokens. Used by
// the EPLB tests and benchmarks; the same seed gives the same routing on every compiler.

#include "model/weights.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace supernode::services {

// tokens x topk expert ids, row-major; each token's ids are distinct. Popularity is Zipf(zipf_s)
// over a seed-dependent permutation of the experts, so the hot ones differ between seeds;
// zipf_s = 0 is uniform. Throws std::invalid_argument for experts <= 0, topk outside
// [1, experts], negative tokens or a negative or non-finite zipf_s.
std::vector<int32_t> skewed_routing(int32_t experts, int32_t topk, int64_t tokens, double zipf_s,
                                    uint64_t seed);

// Token t (row t of routing) belongs to source t % sources; returns row-major
// [sources][experts] token counts, the input of rank_loads. Throws std::invalid_argument for a
// routing that is not whole rows of topk or holds an id outside [0, experts).
std::vector<uint64_t> count_by_source(std::span<const int32_t> routing, int32_t topk,
                                      int32_t experts, int32_t sources);

// Skews a real model's gate the same way: adds to every MoE layer's selection bias
// (e_score_correction_bias, which picks experts but not their weights) `amplitude` times a
// Zipf(zipf_s) popularity over a seed-dependent permutation of the experts. Outputs stay a
// function of the (changed) weights, so every deployment shape must still agree on them.
void skew_gate(model::model_weights& weights, double zipf_s, float amplitude, uint64_t seed);

} // namespace supernode::services
