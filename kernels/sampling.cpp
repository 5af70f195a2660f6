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

namespace {

// The candidates a draw chooses among, best first once walked, with their fixed-point weights.
struct candidates {
  std::vector<int32_t> order;
  std::vector<uint64_t> weight; // by id; 0 outside `order`
  uint64_t total = 0;
};

// top_k, temperature and top_p applied as sample() draws (p.temperature > 0).
candidates candidates_of(std::span<const float> logits, const sampling_params& p) {
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  candidates c;
  auto& order = c.order;
  order.resize(logits.size());
  std::iota(order.begin(), order.end(), 0);
  // top_k: the k best candidates, in any order (the walk sorts them).
  const size_t k = p.top_k > 0 ? std::min<size_t>(p.top_k, logits.size()) : logits.size();
  if (k < order.size()) {
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                     better);
    order.resize(k);
  }
  const double best = logits[argmax(logits)];
  c.weight.assign(logits.size(), 0);
  for (int32_t id : order)
    c.total += c.weight[id] = static_cast<uint64_t>(
        std::exp((static_cast<double>(logits[id]) - best) / p.temperature) * weight_scale);
  // top_p: the smallest best-first prefix whose weight reaches top_p of the total.
  if (p.top_p < 1.0f) {
    const double reach = static_cast<double>(p.top_p) * static_cast<double>(c.total);
    uint64_t acc = 0;
    size_t keep = 0;
    walk_best_first(order, better, [&](int32_t id) {
      acc += c.weight[id];
      ++keep;
      return static_cast<double>(acc) >= reach;
    });
    for (size_t i = keep; i < order.size(); ++i) c.weight[order[i]] = 0;
    order.resize(keep); // walk_best_first left this prefix sorted
    c.total = acc;
  }
  return c;
}

// The draw of sample() for a uniform `u` in [0, 1).
int32_t draw(std::span<const float> logits, candidates& c, double u) {
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const auto target = static_cast<uint64_t>(u * static_cast<double>(c.total));
  uint64_t acc = 0;
  const int32_t chosen = walk_best_first(c.order, better, [&](int32_t id) {
    acc += c.weight[id];
    return target < acc;
  });
  return chosen >= 0 ? chosen : c.order.back();
}

void write_probabilities(const candidates& c, std::span<float> out) {
  for (int32_t id : c.order)
    out[id] = static_cast<float>(static_cast<double>(c.weight[id]) / static_cast<double>(c.total));
}

// Independent streams for the draws of speculative sampling, beside sample()'s own.
constexpr uint64_t draft_stream = 0x6A09E667F3BCC908ull;
constexpr uint64_t accept_stream = 0xBB67AE8584CAA73Bull;
constexpr uint64_t residual_stream = 0x3C6EF372FE94F82Bull;

} // namespace

int32_t sample(std::span<const float> logits, const sampling_params& p, uint64_t step) {
  if (p.temperature <= 0.0f || logits.size() <= 1) return argmax(logits);
  auto c = candidates_of(logits, p);
  return draw(logits, c, uniform_from(p.seed, step));
}

void sampling_probabilities(std::span<const float> logits, const sampling_params& p,
                            std::span<float> out) {
  std::fill(out.begin(), out.end(), 0.0f);
  if (p.temperature <= 0.0f || logits.size() <= 1) {
    out[argmax(logits)] = 1.0f;
    return;
  }
  write_probabilities(candidates_of(logits, p), out);
}

int32_t sample_draft(std::span<const float> draft_logits, const sampling_params& p, uint64_t step,
                     std::span<float> draft_probabilities) {
  if (p.temperature <= 0.0f || draft_logits.size() <= 1) return argmax(draft_logits);
  auto c = candidates_of(draft_logits, p);
  std::fill(draft_probabilities.begin(), draft_probabilities.end(), 0.0f);
  write_probabilities(c, draft_probabilities);
  return draw(draft_logits, c, uniform_from(p.seed ^ draft_stream, step));
}

speculative_choice verify_draft(std::span<const float> target_logits,
                                std::span<const float> draft_probabilities, int32_t draft,
                                const sampling_params& p, uint64_t step) {
  if (p.temperature <= 0.0f || target_logits.size() <= 1) {
    const int32_t best = argmax(target_logits);
    return {best, best == draft};
  }
  std::vector<float> target(target_logits.size());
  sampling_probabilities(target_logits, p, target);
  const double q = draft_probabilities[draft], t = target[draft];
  // Accept with probability min(1, p/q): the accepted draft is distributed as min(p, q).
  if (q > 0.0 && uniform_from(p.seed ^ accept_stream, step) * q < t) return {draft, true};
  // Otherwise draw from max(0, p - q), normalised: together with the accepted drafts, the
  // token is distributed exactly as p (Leviathan et al. 2023, Chen et al. 2023).
  double total = 0.0;
  for (size_t i = 0; i < target.size(); ++i)
    total += std::max(0.0, static_cast<double>(target[i]) - draft_probabilities[i]);
  if (!(total > 0.0)) return {sample(target_logits, p, step), false}; // p == q up to rounding
  const double want = uniform_from(p.seed ^ residual_stream, step) * total;
  double acc = 0.0;
  int32_t last = 0;
  for (size_t i = 0; i < target.size(); ++i) {
    const double r = std::max(0.0, static_cast<double>(target[i]) - draft_probabilities[i]);
    if (r <= 0.0) continue;
    last = static_cast<int32_t>(i);
    acc += r;
    if (want < acc) return {last, false};
  }
  return {last, false};
}

} // namespace supernode::kernels
