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

namespace {

// Weights as fixed-point integers (2^-40 units of the best candidate's weight): their sums are
// exact in any order, so the total needs no sort, only the walk does, and it usually ends within
// the first few candidates. A weight below 2^-40 of the best one is never drawn. 2^40 x 2^23
// candidates still fits 63 bits.
constexpr double weight_scale = 1099511627776.0; // 2^40

// Walks `order` best first (by logit, ties to the lower id), sorting it lazily: each chunk is
// selected with nth_element (linear) and sorted, and the chunks grow, so a walk that stops early
// costs about one pass over the candidates. `visit(id)` returns true to stop; the id it stopped
// at, or -1.
template<class Better, class Visit>
int32_t walk_best_first(std::vector<int32_t>& order, Better better, Visit visit) {
  size_t chunk = 64;
  for (size_t at = 0; at < order.size(); at += chunk, chunk *= 4) {
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(at);
    const auto last =
        order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), at + chunk));
    if (last != order.end()) std::nth_element(first, last, order.end(), better);
    std::sort(first, last, better);
    for (auto it = first; it != last; ++it)
      if (visit(*it)) return *it;
  }
  return -1;
}

} // namespace

int32_t sample(std::span<const float> logits, const sampling_params& p, uint64_t step) {
  if (p.temperature <= 0.0f || logits.size() <= 1) return argmax(logits);
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // top_k: the k best candidates, in any order (the walk sorts them).
  const size_t k = p.top_k > 0 ? std::min<size_t>(p.top_k, logits.size()) : logits.size();
  if (k < order.size()) {
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                     better);
    order.resize(k);
  }
  const double best = logits[argmax(logits)];
  std::vector<uint64_t> weight(logits.size(), 0);
  uint64_t total = 0;
  for (int32_t id : order)
    total += weight[id] = static_cast<uint64_t>(
        std::exp((static_cast<double>(logits[id]) - best) / p.temperature) * weight_scale);
  // top_p: the smallest best-first prefix whose weight reaches top_p of the total.
  if (p.top_p < 1.0f) {
    const double reach = static_cast<double>(p.top_p) * static_cast<double>(total);
    uint64_t acc = 0;
    size_t keep = 0;
    walk_best_first(order, better, [&](int32_t id) {
      acc += weight[id];
      ++keep;
      return static_cast<double>(acc) >= reach;
    });
    order.resize(keep); // walk_best_first left this prefix sorted
    total = acc;
  }
  const auto target =
      static_cast<uint64_t>(uniform_from(p.seed, step) * static_cast<double>(total));
  uint64_t acc = 0;
  const int32_t chosen = walk_best_first(order, better, [&](int32_t id) {
    acc += weight[id];
    return target < acc;
  });
  return chosen >= 0 ? chosen : order.back();
}

} // namespace supernode::kernels
