#include "kernels/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace supernode::kernels {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

double uniform_from(uint64_t seed, uint64_t step) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + (step + 1) * 0xD1B54A32D192ED03ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

int32_t sample(std::span<const float> logits, const sampling_params& p, uint64_t step) {
  if (p.temperature <= 0.0f || logits.size() <= 1) return argmax(logits);
  // Candidates sorted by logit (ties to the lower id), then cut by top-k and top-p.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = p.top_k > 0 ? std::min<size_t>(p.top_k, logits.size()) : logits.size();
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), by_logit);
  order.resize(k);
  std::vector<double> prob(k);
  const double mx = logits[order[0]];
  double sum = 0.0;
  for (size_t i = 0; i < k; ++i) sum += prob[i] = std::exp((logits[order[i]] - mx) / p.temperature);
  size_t keep = k;
  if (p.top_p < 1.0f) {
    double acc = 0.0;
    for (size_t i = 0; i < k; ++i) {
      acc += prob[i] / sum;
      if (acc >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += prob[i];
  double u = uniform_from(p.seed, step) * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= prob[i];
    if (u < 0.0) return order[i];
  }
  return order[keep - 1];
}

} // namespace supernode::kernels
