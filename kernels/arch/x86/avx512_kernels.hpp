#pragma once
// Entry points of the AVX-512 units (compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni) and the AMX unit (also -mamx-tile -mamx-int8). Only call them after kernel_isa
// says the CPU has the path. Same rules as avx2_kernels.hpp: plain pointers and sizes only.

#include "kernels/arch/x86/avx2_kernels.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>

namespace supernode::kernels::avx512 {
// GCC 12 warns that _mm512_cvtepi32_ps's _mm512_undefined_ps pass-through "may be used
// uninitialized"; it is never read (no mask), so the warning is silenced here and only here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline __m512 to_float(__m512i v) {
  return _mm512_cvtepi32_ps(v);
}
#pragma GCC diagnostic pop
} // namespace supernode::kernels::avx512
#endif

namespace supernode::kernels::avx512_vnni {

// As avx2::gemm_int8_block, on the same packed weights, with the same results bit for bit.
void gemm_int8_block(const avx2::int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1);

} // namespace supernode::kernels::avx512_vnni

namespace supernode::kernels::avx512 {

// As avx2::gemm_fp32_block (AVX-512F), on the same packed weights, with the same results.
void gemm_fp32_block(const avx2::fp32_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1);

// As kernels::silu_mul, bit for bit (swiglu_body.hpp).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);

// As avx2::quantize_row (and the portable twin), byte for byte.
float quantize_row(const float* x, int64_t cols, int8_t* q);

// ss[r] = the sum of x[r * ldx + i]² over i in order, in double, for r = 0 .. 7: the bits of
// kernels::rms_norm's scalar loop (rms_norm_avx512.cpp).
void sums_of_squares_8_rows(const float* x, int64_t ldx, int64_t dim, double* ss);
// y[i] = (x[i] * inv) * weight[i], the bits of kernels::rms_norm's scalar loop.
void scale_row(const float* x, float inv, const float* weight, float* y, int64_t dim);

} // namespace supernode::kernels::avx512

namespace supernode::kernels::amx {

// As avx2::gemm_int8_block. Rows in whole tiles of 16 run on AMX; the rest as one zero-padded
// tile, or on the AVX-512 VNNI block when they are few. The first call on a thread loads the tile
// configuration; the process must have been granted the tile state (kernel_isa does that when it
// reports amx as supported).
void gemm_int8_block(const avx2::int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1);

} // namespace supernode::kernels::amx
