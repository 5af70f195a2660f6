#pragma once
// FP32 GEMM y[m][n] = sum_k x[m][k] * W[n][k], W in PyTorch Linear layout. The order in which
// each output sums over k is fixed by the kernel and identical for every M and every row
// position (no M-dependent blocking of k), so results are batch-invariant bit for bit.

#include "kernels/thread_pool.hpp"
#include "kernels/weight_memory.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace supernode::kernels {

class fp32_weight {
public:
  fp32_weight() = default;
  static fp32_weight pack(const float* w, int64_t n, int64_t k);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  float at(int64_t row, int64_t col) const;
  size_t bytes() const { return packed_.size() * sizeof(float); }

  // Packed layout: output channels in panels of 16, four panels to a group; inside a group,
  // for each k, the group's panels side by side (16 floats each), so a kernel covering a whole
  // group streams memory linearly. Channels past n are zero.
  static constexpr int64_t panel_cols = 16;
  static constexpr int64_t group_panels = 4;
  const float* packed() const { return packed_.data(); }
  int64_t panels() const { return (n_ + panel_cols - 1) / panel_cols; }
  int64_t groups() const { return (panels() + group_panels - 1) / group_panels; }
  int64_t panels_in_group(int64_t g) const {
    const int64_t rest = panels() - g * group_panels;
    return rest < group_panels ? rest : group_panels;
  }
  const float* group_data(int64_t g) const {
    return packed_.data() + g * group_panels * panel_cols * k_;
  }

private:
  int64_t n_ = 0, k_ = 0;
  weight_vector<float> packed_;
};

// x has row stride ldx (>= k), y row stride ldy (>= n).
void gemm_fp32(const float* x, int64_t m, int64_t ldx, const fp32_weight& w, float* y, int64_t ldy,
               thread_pool& pool = thread_pool::shared());

void gemm_fp32_reference(const float* x, int64_t m, int64_t ldx, const fp32_weight& w, float* y,
                         int64_t ldy);

struct gemm_fp32_problem {
  const float* x;
  int64_t m;
  int64_t ldx;
  const fp32_weight* w;
  float* y;
  int64_t ldy;
};
void gemm_fp32_grouped(std::span<const gemm_fp32_problem> problems,
                       thread_pool& pool = thread_pool::shared());

} // namespace supernode::kernels
