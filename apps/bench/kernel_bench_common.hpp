#pragma once
// What the kernel benchmark and its oneDNN worker processes share: the shapes, the deterministic
// inputs (so a worker rebuilds exactly the parent's weights and activations from a shape name
// and M), and the timing loop.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace supernode::apps::kernel_bench {

struct shape {
  const char* name;
  int64_t n, k;
};

// The "small" model's matmuls, [N x K] in PyTorch Linear layout.
inline constexpr shape all_shapes[] = {{"q_a", 384, 1024},         {"q_b", 768, 384},
                                       {"kv_a", 288, 1024},        {"kv_b", 1024, 256},
                                       {"o", 1024, 512},           {"dense_gate_up", 5632, 1024},
                                       {"dense_down", 1024, 2816}, {"expert_gate_up", 1024, 1024},
                                       {"expert_down", 1024, 512}, {"lm_head", 129280, 1024}};

inline const shape* find_shape(const char* name) {
  for (const auto& s : all_shapes)
    if (std::strcmp(s.name, name) == 0) return &s;
  return nullptr;
}

// Cheap deterministic values: the weights of lm_head alone are 132M numbers.
inline std::vector<float> pseudo_random(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<float>(static_cast<int64_t>(s >> 40) - (1 << 23)) / float(1 << 23);
  }
  return v;
}

inline std::vector<float> shape_weights(const shape& s) {
  return pseudo_random(static_cast<size_t>(s.n * s.k), static_cast<uint64_t>(s.n * 7 + s.k));
}

inline std::vector<float> shape_activations(const shape& s, int64_t m) {
  return pseudo_random(static_cast<size_t>(m * s.k), static_cast<uint64_t>(m + 99));
}

inline double seconds(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The middle value (the upper one of an even count); v must not be empty.
inline double median(std::vector<double> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

inline double round3(double v) {
  return std::round(v * 1000.0) / 1000.0;
}

// {median, best, worst} of repeated figures where larger is better; v must not be empty.
inline nlohmann::json spread(const std::vector<double>& v) {
  return {{"median", median(v)},
          {"best", *std::max_element(v.begin(), v.end())},
          {"worst", *std::min_element(v.begin(), v.end())}};
}

// Median of repeated runs after one warm-up; the repetitions fill about `budget` seconds.
inline double median_seconds(const auto& fn, double budget) {
  const double first = seconds(fn);
  const int reps = static_cast<int>(std::clamp(budget / std::max(first, 1e-7), 3.0, 300.0));
  std::vector<double> t(reps);
  for (auto& x : t) x = seconds(fn);
  return median(std::move(t));
}

inline double timing_budget(bool quick) {
  return quick ? 0.12 : 0.3;
}

// Multiplies and adds of one GEMM of M rows on shape s.
inline double gemm_ops(int64_t m, const shape& s) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(s.n) * static_cast<double>(s.k);
}

inline nlohmann::json figures(double secs, int64_t m, const shape& s, double weight_bytes) {
  const double ops = gemm_ops(m, s);
  return {
      {"ms", secs * 1e3}, {"gops", ops / secs / 1e9}, {"weight_gbs", weight_bytes / secs / 1e9}};
}

} // namespace supernode::apps::kernel_bench
