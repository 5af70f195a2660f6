#include "apps/bench/weight_pages_bench.hpp"

#include "kernels/gemm_fp32.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

namespace supernode::apps {

namespace {

// The process's AnonHugePages, in MB (what THP actually granted).
double anon_huge_pages_mb() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string key;
  double kb = 0;
  while (f >> key)
    if (key == "AnonHugePages:") {
      f >> kb;
      break;
    }
  return kb / 1024;
}

// y = x W over packed weights laid out as fp32_weight's, at `packed` (one thread, in order).
void gemv(const float* x, const float* packed, int64_t n, int64_t k, float* y) {
  constexpr int64_t pc = kernels::fp32_weight::panel_cols, gpn = kernels::fp32_weight::group_panels;
  const int64_t panels = (n + pc - 1) / pc;
  for (int64_t g = 0; g * gpn < panels; ++g) {
    const int64_t gp = std::min(gpn, panels - g * gpn);
    const float* base = packed + g * gpn * pc * k;
    float acc[gpn * pc] = {};
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t c = 0; c < gp * pc; ++c) acc[c] += x[kk] * base[kk * gp * pc + c];
    std::copy_n(acc, std::min(gp * pc, n - g * gpn * pc), y + g * gpn * pc);
  }
}

} // namespace

nlohmann::json weight_pages_report(int repetitions) {
  const int64_t n = 129280, k = 1024; // small's lm_head
  std::vector<float> w(static_cast<size_t>(n * k));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f;
  const double huge_before = anon_huge_pages_mb();
  const auto huge = kernels::fp32_weight::pack(w.data(), n, k); // weight_vector: huge pages
  const double huge_granted = anon_huge_pages_mb() - huge_before;
  w.clear();
  w.shrink_to_fit();
  // The same packed bytes in an ordinary vector: 4 KB pages under THP's "madvise" mode.
  const std::vector<float> small_pages(huge.packed(), huge.packed() + huge.bytes() / sizeof(float));
  std::vector<float> x(k, 0.5f), y(n);
  double best_small = 1e30, best_huge = 1e30;
  const auto time = [&](const float* packed) {
    const auto t0 = std::chrono::steady_clock::now();
    gemv(x.data(), packed, n, k, y.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  nlohmann::json runs = nlohmann::json::array();
  for (int r = 0; r < repetitions; ++r) {
    const double s = time(small_pages.data()), h = time(huge.packed());
    best_small = std::min(best_small, s);
    best_huge = std::min(best_huge, h);
    runs.push_back({{"4k_ms", s * 1e3}, {"huge_ms", h * 1e3}});
  }
  const double gb = static_cast<double>(huge.bytes()) / 1e9;
  return {{"weights_mb", huge.bytes() / 1e6},       {"huge_pages_granted_mb", huge_granted},
          {"best_4k_pages_gbs", gb / best_small},   {"best_huge_pages_gbs", gb / best_huge},
          {"huge_over_4k", best_small / best_huge}, {"runs", runs}};
}

} // namespace supernode::apps
