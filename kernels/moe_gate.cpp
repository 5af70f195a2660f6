#include "kernels/moe_gate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace supernode::kernels {

namespace {
// Indices of the k largest values, larger first, lower index first among equals.
void top_k_indices(const std::vector<float>& v, int64_t k, std::vector<int32_t>& out) {
  out.resize(v.size());
  std::iota(out.begin(), out.end(), 0);
  std::partial_sort(out.begin(), out.begin() + k, out.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  out.resize(k);
}
} // namespace

void moe_gate(const float* logits, std::span<const float> bias, const moe_gate_params& p,
              int32_t* experts, float* weights) {
  const int64_t n = p.n_experts;
  std::vector<float> scores(n), choice(n);
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
    std::vector<float> group_score(p.n_group);
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
    std::vector<int32_t> keep;
    top_k_indices(group_score, p.topk_group, keep);
    std::vector<bool> kept(p.n_group, false);
    for (auto g : keep) kept[g] = true;
    for (int64_t e = 0; e < n; ++e)
      if (!kept[e / per_group]) choice[e] = -std::numeric_limits<float>::infinity();
  }
  std::vector<int32_t> chosen;
  top_k_indices(choice, p.top_k, chosen);
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
