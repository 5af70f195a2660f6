#include "services/moe/skewed_routing.hpp"

#include "services/loadgen/workload.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace supernode::services {

namespace {

// Draws one index with probability weight / total among the ones not yet taken. Redrawing on a
// taken index samples exactly that conditional distribution; the scan after a few misses only
// bounds the time when the taken experts hold nearly all the weight.
int32_t draw_untaken(const std::vector<double>& cumulative, const std::vector<double>& weight,
                     const std::vector<char>& taken, loadgen::random_stream& rng) {
  constexpr int redraws = 32;
  const double total = cumulative.back();
  for (int attempt = 0; attempt < redraws; ++attempt) {
    const double u = rng.uniform01() * total;
    const auto at = std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
    const auto i = static_cast<int32_t>(std::min<ptrdiff_t>(at, std::ssize(cumulative) - 1));
    if (!taken[i]) return i;
  }
  double left = 0;
  for (size_t i = 0; i < weight.size(); ++i)
    if (!taken[i]) left += weight[i];
  double u = rng.uniform01() * left;
  int32_t last_untaken = -1;
  for (size_t i = 0; i < weight.size(); ++i) {
    if (taken[i]) continue;
    last_untaken = static_cast<int32_t>(i);
    if (u < weight[i]) return last_untaken;
    u -= weight[i];
  }
  return last_untaken; // rounding left u just past the end
}

// Popularity rank i -> expert hot[i] (Fisher-Yates), so the hot experts differ between seeds.
std::vector<int32_t> popularity_order(int32_t experts, loadgen::random_stream& rng) {
  std::vector<int32_t> hot(experts);
  for (int32_t i = 0; i < experts; ++i) hot[i] = i;
  for (int32_t i = experts - 1; i > 0; --i) std::swap(hot[i], hot[rng.uniform_int(0, i)]);
  return hot;
}

} // namespace

std::vector<int32_t> skewed_routing(int32_t experts, int32_t topk, int64_t tokens, double zipf_s,
                                    uint64_t seed) {
  if (experts <= 0 || topk <= 0 || topk > experts || tokens < 0)
    throw std::invalid_argument("skewed routing: need 0 < topk <= experts and tokens >= 0, got " +
                                std::to_string(topk) + " of " + std::to_string(experts) +
                                " experts, " + std::to_string(tokens) + " tokens");
  if (!std::isfinite(zipf_s) || zipf_s < 0)
    throw std::invalid_argument("skewed routing: zipf_s must be finite and >= 0, got " +
                                std::to_string(zipf_s));
  loadgen::random_stream rng(seed);
  const auto hot = popularity_order(experts, rng);

  std::vector<double> weight(experts), cumulative(experts);
  double sum = 0;
  for (int32_t i = 0; i < experts; ++i) {
    weight[i] = std::pow(static_cast<double>(i + 1), -zipf_s);
    cumulative[i] = sum += weight[i];
  }

  std::vector<int32_t> routing;
  routing.reserve(static_cast<size_t>(tokens) * topk);
  std::vector<char> taken(experts, 0);
  std::vector<int32_t> picked(topk);
  for (int64_t t = 0; t < tokens; ++t) {
    for (auto& i : picked) {
      i = draw_untaken(cumulative, weight, taken, rng);
      taken[i] = 1;
      routing.push_back(hot[i]);
    }
    for (int32_t i : picked) taken[i] = 0;
  }
  return routing;
}

std::vector<uint64_t> count_by_source(std::span<const int32_t> routing, int32_t topk,
                                      int32_t experts, int32_t sources) {
  if (topk <= 0 || experts <= 0 || sources <= 0 || routing.size() % topk != 0)
    throw std::invalid_argument("count_by_source: need positive topk, experts and sources and a "
                                "routing of whole rows, got " +
                                std::to_string(routing.size()) + " ids for top-" +
                                std::to_string(topk));
  std::vector<uint64_t> counts(static_cast<size_t>(sources) * experts, 0);
  for (size_t j = 0; j < routing.size(); ++j) {
    const int32_t e = routing[j];
    if (e < 0 || e >= experts)
      throw std::invalid_argument("count_by_source: expert id " + std::to_string(e) +
                                  " at position " + std::to_string(j) + " outside [0, " +
                                  std::to_string(experts) + ")");
    const size_t source = (j / topk) % sources;
    counts[source * experts + e] += 1;
  }
  return counts;
}

void skew_gate(model::model_weights& weights, double zipf_s, float amplitude, uint64_t seed) {
  const auto experts = static_cast<int32_t>(weights.config.n_routed_experts);
  if (!std::isfinite(zipf_s) || zipf_s < 0 || !std::isfinite(amplitude))
    throw std::invalid_argument("skew_gate: zipf_s must be finite and >= 0, amplitude finite");
  loadgen::random_stream rng(seed);
  const auto hot = popularity_order(experts, rng);
  for (auto& layer : weights.layers) {
    if (!layer.is_moe) continue;
    auto& bias = layer.moe.correction_bias;
    if (bias.empty()) bias.assign(static_cast<size_t>(experts), 0.0f);
    for (int32_t i = 0; i < experts; ++i)
      bias[hot[i]] += amplitude * static_cast<float>(std::pow(static_cast<double>(i + 1), -zipf_s));
  }
}

} // namespace supernode::services
