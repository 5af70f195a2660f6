#pragma once
// INT8 GEMM: y[m][n] = (sum_k xq[m][k] * wq[n][k]) * x_scale[m] * w_scale[n].
// Weights use the PyTorch Linear layout W[n][k] (y = x W^T), quantized per output channel at
// load time; activations per token at run time (quantize.hpp). Accumulation is exact int32, and
// the float epilogue is the same two multiplies for every element, so a row's result is
// bit-identical whatever M is and whatever the other rows hold (batch invariance).

#include "kernels/quantize.hpp"
#include "kernels/thread_pool.hpp"
#include "kernels/weight_memory.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace supernode::kernels {

class int8_weight {
public:
  int8_weight() = default;

  // Symmetric per-output-channel quantization of W[n][k] (row r at w + r * k) into [-127, 127].
  static int8_weight quantize(const float* w, int64_t n, int64_t k);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  float scale(int64_t row) const { return scales()[row]; }
  // n() per-channel scales.
  const float* scales() const {
    return reinterpret_cast<const float*>(storage_.data() + scales_offset());
  }
  // The quantized value of W[row][col], read back from the packed layout.
  int8_t at(int64_t row, int64_t col) const;
  // Bytes the kernel streams per full pass over the weight (packed values + scales).
  size_t bytes() const { return static_cast<size_t>(packed_bytes() + n_ * sizeof(float)); }

  // Packed layout, owned by the kernel implementations and read by all of them: output
  // channels in panels of 8, four panels to a group; inside a group, for each run of 4 k, the
  // group's panels side by side, each 8 channels x 4 bytes (one 32-byte AVX2 vector). Panels
  // come in pairs (n is padded to 16 channels), so two neighbouring panels are one 64-byte ZMM
  // vector of 16 channels, and 16 consecutive runs of a pair, at the group's run stride, are
  // one AMX B tile (16 rows of 16 channels x 4 k). A kernel covering a whole group therefore
  // streams memory linearly. Channels past n and k past k() are zero.
  static constexpr int64_t panel_cols = 8;
  static constexpr int64_t k_group = 4;
  static constexpr int64_t group_panels = 4;
  static constexpr int64_t panel_align = 2;
  const int8_t* packed() const { return storage_.data(); }
  int64_t k_padded() const { return k_padded_; }
  int64_t panels() const {
    return (n_ + panel_cols * panel_align - 1) / (panel_cols * panel_align) * panel_align;
  }
  int64_t groups() const { return (panels() + group_panels - 1) / group_panels; }
  int64_t panels_in_group(int64_t g) const {
    const int64_t rest = panels() - g * group_panels;
    return rest < group_panels ? rest : group_panels;
  }
  const int8_t* group_data(int64_t g) const {
    return storage_.data() + g * group_panels * panel_cols * k_padded_;
  }
  // -128 * sum_k W[c][k] per packed channel c (zero past n), made at load time for the AVX-512
  // path, which multiplies x + 128 (as u8) by w: starting each sum here makes it exact again.
  const int32_t* u8_compensation() const {
    return reinterpret_cast<const int32_t*>(storage_.data() + packed_bytes());
  }

private:
  int64_t packed_bytes() const { return panels() * panel_cols * k_padded_; }
  int64_t scales_offset() const {
    return packed_bytes() + panels() * panel_cols * static_cast<int64_t>(sizeof(int32_t));
  }

  int64_t n_ = 0, k_ = 0, k_padded_ = 0;
  // One buffer: the packed values, then the compensation sums, then the scales. A small
  // matrix (a MoE expert's) then sits in one huge page with its metadata instead of touching
  // two more 4 KB heap pages, each a TLB miss and a page walk once per decode step.
  weight_vector<int8_t> storage_;
};

// y has row stride ldy (>= w.n()). x.cols must equal w.k().
void gemm_int8(const quantized_rows& x, const int8_weight& w, float* y, int64_t ldy,
               thread_pool& pool = thread_pool::shared());

// Straightforward scalar loops over the same quantized inputs: the truth the tests compare to.
void gemm_int8_reference(const quantized_rows& x, const int8_weight& w, float* y, int64_t ldy);

// Grouped GEMM for MoE experts: independent problems (one per expert with tokens) scheduled
// together over the pool, so small per-expert batches still keep every core busy.
struct gemm_int8_problem {
  const quantized_rows* x;
  const int8_weight* w;
  float* y;
  int64_t ldy;
};
void gemm_int8_grouped(std::span<const gemm_int8_problem> problems,
                       thread_pool& pool = thread_pool::shared());

} // namespace supernode::kernels
