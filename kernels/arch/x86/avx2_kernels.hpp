#pragma once
// Entry points of the AVX2/FMA translation units (compiled with -mavx2 -mfma -mf16c). Only
// call them after kernel_isa says the CPU has AVX2 and FMA.
//
// These units see plain pointers and sizes, never our classes or std:: templates: an inline
// function they instantiated could be the copy the linker keeps for the whole program, and
// would then run AVX2 code on a CPU without it.

#include <cstdint>

namespace supernode::kernels::avx2 {

float quantize_row(const float* x, int64_t cols, int8_t* q);

// As kernels::silu_mul, bit for bit (swiglu_body.hpp).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// Layout constants mirror int8_weight / fp32_weight (checked by static_asserts in the drivers).
inline constexpr int64_t int8_panel_cols = 8, int8_k_group = 4, int8_group_panels = 4;
inline constexpr int64_t fp32_panel_cols = 16, fp32_group_panels = 4;

struct int8_operands {
  const int8_t* x; // quantized rows, stride ldx, padded with zeros to k_padded
  int64_t ldx;
  const float* x_scale;
  const int8_t* packed;           // int8_weight::packed()
  const float* w_scale;           // n entries
  const int32_t* u8_compensation; // int8_weight::u8_compensation(), panels * 8 entries
  int64_t n, panels, k_padded;
  float* y;
  int64_t ldy;
};
// Rows [m0, m1) against the panel groups [g0, g1), for the whole K.
void gemm_int8_block(const int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1);

struct fp32_operands {
  const float* x;
  int64_t ldx;
  const float* packed; // fp32_weight::packed()
  int64_t n, k;
  float* y;
  int64_t ldy;
};
void gemm_fp32_block(const fp32_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1);

} // namespace supernode::kernels::avx2
