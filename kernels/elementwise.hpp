#pragma once
// Row-wise FP32 kernels of the transformer: RMSNorm, SwiGLU, softmax. Each row is reduced
// sequentially in index order, so a row's result never depends on the batch it sits in.

#include <cstdint>

namespace supernode::kernels {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of `dim` (strides ldx, ldy).
// y may alias x.
void rms_norm(const float* x, int64_t rows, int64_t dim, int64_t ldx, const float* weight,
              float eps, float* y, int64_t ldy);

// out[i] = silu(gate[i]) * up[i], the SwiGLU of DeepSeek's MLPs and experts.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// In-place softmax of n values.
void softmax(float* x, int64_t n);

// y += alpha * x, element by element (a rounded multiply, then a rounded add): the same bits
// on every path.
void axpy(float alpha, const float* x, float* y, int64_t n);

// y += coef[r] * row r of w, for the rows r = 0 .. rows - 1 (len floats each, contiguous) in
// order: the bits of axpy(coef[r], w + r * len, y, len) row after row, with y held in registers
// over all the rows instead of loaded and stored for each (a weight-absorbed GEMV).
void add_weighted_rows(const float* w, int64_t rows, int64_t len, const float* coef, float* y);
// y = Σ coef[r] * rows[r] over `count` rows anywhere in memory (len floats each), then
// + then_add when it is not null: the bits of zeroing y, axpy(coef[r], rows[r], y, len) for
// r = 0, 1, ... and adding then_add, in one pass (the MoE combine of a token's routes, and its
// shared expert's output).
void weighted_sum_of_rows(const float* const* rows, int64_t count, int64_t len, const float* coef,
                          const float* then_add, float* y);

} // namespace supernode::kernels
