#pragma once
// The INT8 GEMM block driver and register tiles shared by the AVX2 and AVX-VNNI units. Only
// those units include this file, each compiled with its own -m flags; everything here sits in
// an unnamed namespace so each gets its own copy, never one the linker could pick for the other
// (see avx2_kernels.hpp).
//
// `Dot::add(acc, u, s)` adds the four-byte dot products of u (u8) and s (s8) into the int32
// lanes of acc, exactly. The tiles feed it |x| with w's sign moved onto x, or |w| with x's sign
// moved onto w: both operands stay within 127 in magnitude (quantization never emits -128), so
// no step of any Dot saturates and the int32 sums are the reference's, in whatever order.

#include "kernels/arch/x86/avx2_kernels.hpp"

#include <cstring>
#include <immintrin.h>

namespace supernode::kernels::x86_int8 {

namespace {
using avx2::int8_operands;
constexpr int64_t pc = avx2::int8_panel_cols, kg = avx2::int8_k_group,
                  gpn = avx2::int8_group_panels;
constexpr int64_t group_cols = gpn * pc;

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Software prefetch runs this far ahead of a single streaming pass (16 k-runs of a group);
// measured on the 132 MB lm_head weight, where the hardware prefetcher alone fell short.
constexpr int64_t prefetch_distance = 2048;
// k-runs per block when several tiles share a block: 64 runs of a full group is 8 KB, which
// stays in L1 while every row tile and panel pair passes over it.
constexpr int64_t k_block_runs = 64;

inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// MR rows x NP panels (8 columns each) over kq runs of 4 k. `w` points at the first panel's
// first run inside its group; consecutive runs are `wstride` bytes apart. Partial int32 sums
// live in `part` (row stride group_cols) between k blocks; the last block applies the epilogue.
// With PRE_ABS, |w| comes from `wabs` (same layout as w, made once per k block for all row
// tiles) instead of a vpabsb per tile: an ALU op competing for the same two ports as the dot
// step (four ops per pair on AVX2, two on AVX-VNNI), on the compute-bound large-M path.
template<class Dot, int MR, int NP, bool PRE_ABS>
void tile(const int8_t* x, int64_t ldx, const int8_t* w, const int8_t* wabs, int64_t wstride,
          int64_t kq, const int8_t* pf, int64_t pf_step, int32_t* part, bool first, bool last,
          const float* xs, const float* ws, float* y, int64_t ldy, int64_t ncols) {
  __m256i acc[MR][NP];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p)
      acc[m][p] =
          first
              ? _mm256_setzero_si256()
              : _mm256_load_si256(reinterpret_cast<const __m256i*>(part + m * group_cols + p * pc));
  for (int64_t q = 0; q < kq; ++q) {
    const int8_t* wq = w + q * wstride;
    // The caller spreads prefetches of the weights needed next over the iterations.
    _mm_prefetch(reinterpret_cast<const char*>(pf + q * pf_step), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(pf + q * pf_step + 64), _MM_HINT_T0);
    __m256i wv[NP];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p)
      wv[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + p * pc * kg));
    if constexpr (NP >= MR) {
      // Fewer rows than panels: take |x| once per row and move x's sign onto w.
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        const __m256i xb = broadcast4(x + m * ldx + q * kg);
        const __m256i xa = _mm256_abs_epi8(xb);
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
          acc[m][p] = Dot::add(acc[m][p], xa, _mm256_sign_epi8(wv[p], xb));
        }
      }
    } else {
      // More rows than panels: take |w| once per panel and move w's sign onto x.
      __m256i wa[NP];
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p)
        wa[p] = PRE_ABS ? _mm256_loadu_si256(
                              reinterpret_cast<const __m256i*>(wabs + q * wstride + p * pc * kg))
                        : _mm256_abs_epi8(wv[p]);
#pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        const __m256i xb = broadcast4(x + m * ldx + q * kg);
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
          acc[m][p] = Dot::add(acc[m][p], wa[p], _mm256_sign_epi8(xb, wv[p]));
        }
      }
    }
  }
  if (!last) {
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
      for (int p = 0; p < NP; ++p)
        _mm256_store_si256(reinterpret_cast<__m256i*>(part + m * group_cols + p * pc), acc[m][p]);
    return;
  }
  // Epilogue (float(acc) * x_scale) * w_scale, as gemm_int8_reference computes it.
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    const __m256 xsv = _mm256_set1_ps(xs[m]);
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) {
      const __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[m][p]), xsv),
                                     _mm256_loadu_ps(ws + p * pc));
      float* dst = y + m * ldy + p * pc;
      const int64_t left = ncols - p * pc;
      if (left >= pc) {
        _mm256_storeu_ps(dst, f);
      } else if (left > 0) {
        alignas(32) float tmp[pc];
        _mm256_store_ps(tmp, f);
        std::memcpy(dst, tmp, static_cast<size_t>(left) * sizeof(float));
      }
    }
  }
}

using tile_fn = void (*)(const int8_t*, int64_t, const int8_t*, const int8_t*, int64_t, int64_t,
                         const int8_t*, int64_t, int32_t*, bool, bool, const float*, const float*,
                         float*, int64_t, int64_t);

template<class Dot, int NP, bool PRE_ABS>
tile_fn tile_for_rows(int64_t mr) {
  switch (mr) {
  case 1:
    return tile<Dot, 1, NP, PRE_ABS>;
  case 2:
    return tile<Dot, 2, NP, PRE_ABS>;
  case 3:
    return tile<Dot, 3, NP, PRE_ABS>;
  default:
    return tile<Dot, 4, NP, PRE_ABS>;
  }
}

// PRE_ABS only matters where the tile has more rows than panels (|w| is taken per panel).
template<class Dot>
tile_fn pick_tile(int64_t mr, int64_t np, bool pre_abs) {
  if (pre_abs && mr > np)
    return np == 2 ? tile_for_rows<Dot, 2, true>(mr) : tile_for_rows<Dot, 1, true>(mr);
  return np == 4   ? tile_for_rows<Dot, 4, false>(mr)
         : np == 2 ? tile_for_rows<Dot, 2, false>(mr)
                   : tile_for_rows<Dot, 1, false>(mr);
}

// Panels the next tile covers when `left` remain in the group.
inline int64_t next_panels(int64_t left, int64_t np_max) {
  return left >= np_max ? np_max : left >= 2 ? 2 : 1;
}

// Rows handled per pass over a k block; the partial sums of that many rows stay on the stack.
constexpr int64_t rows_per_pass = 64;
template<class Dot>
void gemm_int8_block(const int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  const int64_t kq = o.k_padded / kg, panels = o.panels;
  alignas(32) float ws[group_cols];
  alignas(32) int32_t part[rows_per_pass * group_cols];
  alignas(32) int8_t wabs[k_block_runs * group_cols * kg];
  for (int64_t r0 = m0; r0 < m1; r0 += rows_per_pass) {
    const int64_t r1 = min64(m1, r0 + rows_per_pass), rows = r1 - r0;
    // Up to two rows, all four panels of a group fit the registers and one pass streams the
    // group linearly. Beyond, 4x2 tiles walk a k block (kept in L1) once per panel pair and
    // row tile, so memory still sees the group once, front to back.
    const int64_t np_max = rows <= 2 ? 4 : 2, mr_max = rows <= 2 ? rows : 4;
    const int64_t k_block = rows <= 2 ? kq : k_block_runs;
    const int64_t row_tiles = (rows + mr_max - 1) / mr_max;
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t gp = min64(gpn, panels - g * gpn), wstride = gp * pc * kg;
      const int8_t* base = o.packed + g * gpn * pc * o.k_padded;
      const int64_t col0 = g * group_cols, ncols = min64(gp * pc, o.n - col0);
      for (int64_t c = 0; c < gp * pc; ++c) ws[c] = c < ncols ? o.w_scale[col0 + c] : 0.0f;
      int64_t panel_sets = 0;
      for (int64_t p = 0; p < gp; p += next_panels(gp - p, np_max)) ++panel_sets;
      for (int64_t kb = 0; kb < kq || kb == 0; kb += k_block) {
        const int64_t kn = min64(k_block, kq - kb);
        const bool first = kb == 0, last = kb + kn >= kq;
        const int8_t* block = base + kb * wstride;
        // Several row tiles share this block: take |w| once for all of them.
        const bool pre_abs = row_tiles >= 2 && kn <= k_block_runs;
        if (pre_abs)
          for (int64_t i = 0; i < kn * wstride; i += 32)
            _mm256_store_si256(
                reinterpret_cast<__m256i*>(wabs + i),
                _mm256_abs_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + i))));
        // Groups lie back to back, so the bytes after this k block are the next ones needed.
        // One pass: stay a fixed distance ahead. Several passes: each prefetches its share of
        // the next block, keeping memory busy while the block is reused from L1.
        const int64_t passes = panel_sets * row_tiles, block_bytes = kn * wstride;
        const int64_t slice = (block_bytes + passes - 1) / passes;
        int64_t pass = 0;
        for (int64_t p = 0; p < gp;) {
          const int64_t np = next_panels(gp - p, np_max);
          for (int64_t m = r0; m < r1; ++pass) {
            const int64_t mr = min64(mr_max, r1 - m);
            const int8_t* w = block + p * pc * kg;
            const int8_t* pf =
                passes == 1 ? w + prefetch_distance : block + block_bytes + pass * slice;
            const int64_t pf_step = passes == 1 ? wstride : slice / (kn > 0 ? kn : 1);
            pick_tile<Dot>(mr, np, pre_abs)(
                o.x + m * o.ldx + kb * kg, o.ldx, w, wabs + p * pc * kg, wstride, kn, pf, pf_step,
                part + (m - r0) * group_cols + p * pc, first, last, o.x_scale + m, ws + p * pc,
                o.y + m * o.ldy + col0 + p * pc, o.ldy, ncols - p * pc);
            m += mr;
          }
          p += np;
        }
      }
    }
  }
}

} // namespace

} // namespace supernode::kernels::x86_int8
