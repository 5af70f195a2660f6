#pragma once
// Per-token (per-row) symmetric INT8 quantization of activations, as in the paper's §4.5:
// scale = max|x| / 127, q = round(x / scale) clamped to [-127, 127]. -128 is never produced,
// which keeps the AVX2 sign trick (|a| as u8 times sign-adjusted w) free of int16 saturation.

#include "kernels/scratch_vector.hpp"

#include <cstdint>

namespace supernode::kernels {

// Rows are padded to a multiple of this many bytes: the INT8 kernels consume k four at a time.
inline constexpr int64_t quantize_k_step = 4;

struct quantized_rows {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0; // cols rounded up to the kernel's K step; the padding is zero
  // Whoever sizes these writes every row in full, padding included (quantize_rows, the MoE
  // gathers): an expert's rows change from layer to layer, and growing a std::vector would
  // zero-fill what is about to be overwritten.
  scratch_vector<int8_t> q;    // rows * stride
  scratch_vector<float> scale; // per row; 0 for an all-zero row

  const int8_t* row(int64_t r) const { return q.data() + r * stride; }
};

// Quantizes `rows` rows of `cols` floats (row r starts at x + r * ldx). Reuses `out`'s storage.
void quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t ldx, quantized_rows& out);

// One row: writes `cols` values into q (no padding) and returns the scale. Also quantizes
// weights per output channel (int8_weight::quantize).
float quantize_row(const float* x, int64_t cols, int8_t* q);

// Inverse, for tests and for shipping quantized tokens: y[r][c] = q[r][c] * scale[r].
void dequantize_rows(const quantized_rows& in, float* y, int64_t ldy);

} // namespace supernode::kernels
