// AVX-512 FP32 GEMM blocks on the same packed weights as the AVX2 unit (a 16-channel panel is
// one ZMM vector). Every output is the same single FMA chain acc = fma(x[k], w[k], acc) for
// k = 0..K-1 as on AVX2, so the two paths give the same bits, and a row's result does not depend
// on M. The 32 ZMM registers hold 6 rows x 4 panels of accumulators, where AVX2's 16 YMM
// registers hold 6 rows x 1 panel: four times the work per broadcast of x.

#include "kernels/arch/x86/avx512_kernels.hpp"

#include <immintrin.h>
#include <utility>

namespace supernode::kernels::avx512 {

namespace {
constexpr int64_t pc = avx2::fp32_panel_cols, gpn = avx2::fp32_group_panels;
static_assert(pc == 16, "one fp32 panel is one ZMM vector");
constexpr int max_tile_rows = 6;

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// MR rows x NP panels over all of K; consecutive k are `wstride` floats apart in the group.
template<int MR, int NP>
void tile(const float* x, int64_t ldx, const float* w, int64_t wstride, int64_t k, float* y,
          int64_t ldy, int64_t ncols) {
  __m512 acc[MR][NP];
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* wk = w + kk * wstride;
    __m512 wv[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) wv[p] = _mm512_loadu_ps(wk + p * pc);
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      const __m512 xb = _mm512_set1_ps(x[m * ldx + kk]);
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_fmadd_ps(xb, wv[p], acc[m][p]);
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      const int64_t left = ncols - p * pc;
      if (left > 0)
        _mm512_mask_storeu_ps(y + m * ldy + p * pc,
                              left >= pc ? __mmask16(0xffff) : __mmask16((1u << left) - 1),
                              acc[m][p]);
    }
}

using tile_fn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                         int64_t);

template<int... R>
constexpr auto tile_table(std::integer_sequence<int, R...>) {
  struct table {
    tile_fn by_panels[4][sizeof...(R)];
  };
  return table{
      {{tile<R + 1, 1>...}, {tile<R + 1, 2>...}, {tile<R + 1, 3>...}, {tile<R + 1, 4>...}}};
}
constexpr auto tiles = tile_table(std::make_integer_sequence<int, max_tile_rows>{});
} // namespace

void gemm_fp32_block(const avx2::fp32_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  const int64_t panels = (o.n + pc - 1) / pc;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t gp = min64(gpn, panels - g * gpn);
    const float* base = o.packed + g * gpn * pc * o.k;
    const int64_t col0 = g * gpn * pc, ncols = min64(gp * pc, o.n - col0);
    for (int64_t m = m0; m < m1;) {
      const int64_t mr = min64(max_tile_rows, m1 - m);
      tiles.by_panels[gp - 1][mr - 1](o.x + m * o.ldx, o.ldx, base, gp * pc, o.k,
                                      o.y + m * o.ldy + col0, o.ldy, ncols);
      m += mr;
    }
  }
}

} // namespace supernode::kernels::avx512
