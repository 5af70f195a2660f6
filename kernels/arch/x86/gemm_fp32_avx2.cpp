// AVX2/FMA FP32 GEMM blocks. Every output is the single FMA chain acc = fma(x[k], w[k], acc)
// for k = 0..K-1, in every tile shape, so a row's result does not depend on M.

#include "kernels/arch/x86/avx2_kernels.hpp"

#include <cstring>
#include <immintrin.h>

namespace supernode::kernels::avx2 {

namespace {
constexpr int64_t pc = fp32_panel_cols, gpn = fp32_group_panels;

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
constexpr int vecs = pc / 8; // 256-bit vectors per panel

// MR rows x NP panels over all of K; consecutive k are `wstride` floats apart in the group.
template<int MR, int NP>
void tile(const float* x, int64_t ldx, const float* w, int64_t wstride, int64_t k, float* y,
          int64_t ldy, int64_t ncols) {
  __m256 acc[MR][NP * vecs];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NP * vecs; ++j) acc[m][j] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* wk = w + kk * wstride;
#pragma GCC unroll 8
    for (int m = 0; m < MR; ++m) {
      const __m256 xb = _mm256_broadcast_ss(x + m * ldx + kk);
#pragma GCC unroll 8
      for (int j = 0; j < NP * vecs; ++j)
        acc[m][j] = _mm256_fmadd_ps(xb, _mm256_loadu_ps(wk + j * 8), acc[m][j]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int j = 0; j < NP * vecs; ++j) {
      float* dst = y + m * ldy + j * 8;
      const int64_t left = ncols - j * 8;
      if (left >= 8) {
        _mm256_storeu_ps(dst, acc[m][j]);
      } else if (left > 0) {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, acc[m][j]);
        std::memcpy(dst, tmp, static_cast<size_t>(left) * sizeof(float));
      }
    }
}

using tile_fn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                         int64_t);

template<int NP>
tile_fn tile_for_rows(int64_t mr) {
  switch (mr) {
  case 1:
    return tile<1, NP>;
  case 2:
    return tile<2, NP>;
  case 3:
    return tile<3, NP>;
  case 4:
    return tile<4, NP>;
  case 5:
    return tile<5, NP>;
  default:
    return tile<6, NP>;
  }
}

tile_fn pick_tile(int64_t mr, int64_t np) {
  return np == 4 ? tile_for_rows<4>(mr) : np == 2 ? tile_for_rows<2>(mr) : tile_for_rows<1>(mr);
}
} // namespace

void gemm_fp32_block(const fp32_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  const int64_t rows = m1 - m0, panels = (o.n + pc - 1) / pc;
  // Enough independent chains to cover the FMA latency, without spilling accumulators:
  // 1 row x 4 panels, 2-3 rows x 2 panels, else 6 rows x 1 panel.
  const int64_t np_max = rows <= 1 ? 4 : rows <= 3 ? 2 : 1, mr_max = rows <= 3 ? rows : 6;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t gp = min64(gpn, panels - g * gpn);
    const float* base = o.packed + g * gpn * pc * o.k;
    for (int64_t p = 0; p < gp;) {
      const int64_t np = gp - p >= np_max ? np_max : gp - p >= 2 ? 2 : 1;
      const int64_t col0 = (g * gpn + p) * pc, ncols = min64(np * pc, o.n - col0);
      for (int64_t m = m0; m < m1;) {
        const int64_t mr = min64(mr_max, m1 - m);
        pick_tile(mr, np)(o.x + m * o.ldx, o.ldx, base + p * pc, gp * pc, o.k,
                          o.y + m * o.ldy + col0, o.ldy, ncols);
        m += mr;
      }
      p += np;
    }
  }
}

} // namespace supernode::kernels::avx2
