#include "kernels/moe_gate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace supernode::kernels {

namespace {
// Writes the indices of the k largest of v[0, n) to out, larger first, lower index first among
// equals: a strict total order, so the result is the one partial_sort gives. Insertion into a
// k-long sorted run: n is a few hundred experts at most and k a handful, and a prefill routes
// thousands of tokens a layer.
void top_k_indices(const float* v, int64_t n, int64_t k, int32_t* out) {
  int64_t held = 0;
  for (int64_t i = 0; i < n; ++i) {
    // Candidates come in index order, so an equal value already held ranks first.
    if (held == k && !(v[i] > v[out[k - 1]])) continue;
    int64_t at = held < k ? held++ : k - 1;
    for (; at > 0 && v[i] > v[out[at - 1]]; --at) out[at] = out[at - 1];
    out[at] = static_cast<int32_t>(i);
  }
}

// Per-thread buffers: a prefill calls the gate once per token on every pool thread.
struct gate_scratch {
  std::vector<float> scores, choice, group_score;
  std::vector<int32_t> groups_kept, chosen;
};
} // namespace

void moe_gate(const float* logits, std::span<const float> bias, const moe_gate_params& p,
              int32_t* experts, float* weights) {
  const int64_t n = p.n_experts;
  thread_local gate_scratch scratch;
  auto& scores = scratch.scores;
  auto& choice = scratch.choice;
  scores.resize(n);
  choice.resize(n);
  if (p.sigmoid) {
    for (int64_t e = 0; e < n; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  } else {
    float mx = *std::max_element(logits, logits + n), sum = 0.0f;
    for (int64_t e = 0; e < n; ++e) sum += scores[e] = std::exp(logits[e] - mx);
    for (auto& s : scores) s /= sum;
  }
  for (int64_t e = 0; e < n; ++e) choice[e] = bias.empty() ? scores[e] : scores[e] + bias[e];

  if (p.n_group > 1) {
    const int64_t per_group = n / p.n_group;
    auto& group_score = scratch.group_score;
    group_score.resize(p.n_group);
    for (int64_t g = 0; g < p.n_group; ++g) {
      const float* s = choice.data() + g * per_group;
      if (bias.empty()) {
        group_score[g] = *std::max_element(s, s + per_group);
      } else { // sum of the two best, as the official noaux_tc gate does
        float best = -std::numeric_limits<float>::infinity(), second = best;
        for (int64_t i = 0; i < per_group; ++i) {
          if (s[i] > best) {
            second = best;
            best = s[i];
          } else if (s[i] > second) {
            second = s[i];
          }
        }
        group_score[g] = per_group > 1 ? best + second : best;
      }
    }
    auto& kept = scratch.groups_kept;
    kept.resize(p.topk_group);
    top_k_indices(group_score.data(), p.n_group, p.topk_group, kept.data());
    // Every expert of a group not kept is out of the choice.
    for (int64_t g = 0; g < p.n_group; ++g)
      if (std::find(kept.begin(), kept.end(), g) == kept.end())
        std::fill_n(choice.data() + g * per_group, per_group,
                    -std::numeric_limits<float>::infinity());
  }
  auto& chosen = scratch.chosen;
  chosen.resize(p.top_k);
  top_k_indices(choice.data(), n, p.top_k, chosen.data());
  float sum = 0.0f;
  for (int64_t i = 0; i < p.top_k; ++i) {
    experts[i] = chosen[i];
    weights[i] = scores[chosen[i]];
    sum += weights[i];
  }
  const bool normalize = p.normalize && p.top_k > 1;
  for (int64_t i = 0; i < p.top_k; ++i)
    weights[i] = (normalize ? weights[i] / sum : weights[i]) * p.routed_scaling_factor;
}

} // namespace supernode::kernels
