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

} // namespace supernode::kernels
