#pragma once
// The AMX INT8 block driver, written against a Tiles policy so that its tiling, k tail and
// epilogue also run on machines without AMX: tests/kernels/gemm_int8_amx_test.cpp drives it with
// a scalar model of the tile instructions, and the AMX unit with the instructions themselves.
//
// Tiles provides, with tile numbers as template arguments (the instructions take immediates):
//   template<int T> static void zero();
//   template<int T> static void load(const void* p, int64_t stride);  // 16 rows of 64 bytes
//   template<int T> static void store(void* p, int64_t stride);       // 16 rows of 64 bytes
//   template<int C, int A, int B> static void dpbssd();
// dpbssd is TDPBSSD: C[m][n] += sum_i A[m][4i + j] * B[i][4n + j] over j < 4 and the 16 rows i
// of B, s8 x s8 products added to int32 with no saturation, so the sums are exact. Every tile is
// configured as 16 rows x 64 bytes: tiles 0-3 accumulate (16 x 16 int32), 4-5 hold x (16 rows x
// 64 k), 6-7 weights (16 runs of 4 k x 16 channels). That B layout is a panel pair of the packed
// weights read at the group's run stride, so weights are loaded straight from int8_weight.

#include "kernels/arch/x86/avx512_kernels.hpp"

#include <cstring>

namespace supernode::kernels::amx_driver {

namespace {
using avx2::int8_operands;
constexpr int64_t pc = avx2::int8_panel_cols, kg = avx2::int8_k_group,
                  gpn = avx2::int8_group_panels;
constexpr int64_t group_cols = gpn * pc;
constexpr int64_t tile_rows = 16, tile_bytes = 64;
constexpr int64_t tile_runs = tile_bytes / kg; // runs of 4 k per step: 64 k
constexpr int64_t tile_cols = tile_bytes / 4;  // channels of a weight or accumulator tile
constexpr int x_tile = 4, w_tile = 6;

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Scratch for the k tail (fewer than 64 k left: copied, zero-padded, so no tile load reads past
// a row or into the next group) and for the accumulators on their way to the epilogue.
struct scratch {
  alignas(64) int8_t x_tail[2][tile_rows * tile_bytes];
  alignas(64) int8_t w_tail[2][tile_rows * tile_bytes];
  alignas(64) int32_t acc[tile_rows * tile_cols];
};

template<class Tiles, int RT, int CT, int R = 0, int C = 0>
void for_each_product() {
  Tiles::template dpbssd<R * 2 + C, x_tile + R, w_tile + C>();
  if constexpr (C + 1 < CT)
    for_each_product<Tiles, RT, CT, R, C + 1>();
  else if constexpr (R + 1 < RT)
    for_each_product<Tiles, RT, CT, R + 1, 0>();
}

template<class Tiles, int T, int N>
void zero_tiles() {
  Tiles::template zero<T>();
  if constexpr (N > 1) zero_tiles<Tiles, T + 1, N - 1>();
}

template<class Tiles, int R, int RT>
void load_x(const int8_t* p, int64_t stride) {
  Tiles::template load<x_tile + R>(p + R * tile_rows * stride, stride);
  if constexpr (R + 1 < RT) load_x<Tiles, R + 1, RT>(p, stride);
}

template<class Tiles, int C, int CT>
void load_w(const int8_t* p, int64_t stride) {
  Tiles::template load<w_tile + C>(p + C * tile_bytes, stride);
  if constexpr (C + 1 < CT) load_w<Tiles, C + 1, CT>(p, stride);
}

// The next k step's x rows (RT tiles of 16 rows, one line each) and weight runs (16 runs of
// `wstride` bytes, contiguous) into L1 while this step's products run: a tile load that misses
// L1 stalls the products behind it.
template<int RT>
inline void prefetch_step(const int8_t* x, int64_t ldx, const int8_t* w, int64_t wstride) {
  for (int64_t r = 0; r < RT * tile_rows; ++r) __builtin_prefetch(x + r * ldx, 0, 3);
  for (int64_t b = 0; b < tile_runs * wstride; b += 64) __builtin_prefetch(w + b, 0, 3);
}

// Accumulator (R, C) to y: rows m + 16R .., below `rows_end`, channels col0 + 16C .., at most
// `ncols` - 16C of them, as (float(acc) * x_scale) * w_scale like gemm_int8_reference. Two
// rounded multiplies per element in that order on every path, so the vector epilogue (where the
// unit is compiled for AVX-512) gives the scalar one's bits.
template<class Tiles, int R, int C>
void store_rows(const int8_operands& o, int64_t m, int64_t rows_end, int64_t col0, int64_t ncols,
                scratch& s) {
  Tiles::template store<R * 2 + C>(s.acc, tile_cols * sizeof(int32_t));
  const int64_t c0 = col0 + C * tile_cols, n = min64(tile_cols, ncols - C * tile_cols);
  const int64_t rows = min64(tile_rows, rows_end - (m + R * tile_rows));
#if defined(__AVX512F__)
  const __mmask16 lanes = static_cast<__mmask16>((1u << n) - 1u);
  const __m512 ws = _mm512_maskz_loadu_ps(lanes, o.w_scale + c0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = m + R * tile_rows + r;
    const __m512 acc = avx512::to_float(_mm512_load_si512(s.acc + r * tile_cols));
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(acc, _mm512_set1_ps(o.x_scale[row])), ws);
    _mm512_mask_storeu_ps(o.y + row * o.ldy + c0, lanes, v);
  }
#else
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = m + R * tile_rows + r;
    const float xs = o.x_scale[row];
    float* y = o.y + row * o.ldy + c0;
    for (int64_t c = 0; c < n; ++c)
      y[c] = static_cast<float>(s.acc[r * tile_cols + c]) * xs * o.w_scale[c0 + c];
  }
#endif
}

template<class Tiles, int RT, int CT, int R = 0, int C = 0>
void store_all(const int8_operands& o, int64_t m, int64_t rows_end, int64_t col0, int64_t ncols,
               scratch& s) {
  if (m + R * tile_rows < rows_end) store_rows<Tiles, R, C>(o, m, rows_end, col0, ncols, s);
  if constexpr (C + 1 < CT)
    store_all<Tiles, RT, CT, R, C + 1>(o, m, rows_end, col0, ncols, s);
  else if constexpr (R + 1 < RT)
    store_all<Tiles, RT, CT, R + 1, 0>(o, m, rows_end, col0, ncols, s);
}

// RT row tiles (16 rows each, from m) x CT weight tiles (16 channels each) of one panel group,
// over the whole K.
template<class Tiles, int RT, int CT>
void group_tiles(const int8_operands& o, int64_t m, int64_t rows_end, const int8_t* base,
                 int64_t wstride, int64_t col0, int64_t ncols, scratch& s) {
  const int64_t kq = o.k_padded / kg, steps = kq / tile_runs, tail = kq % tile_runs;
  const int8_t* x = o.x + m * o.ldx;
  zero_tiles<Tiles, 0, RT * 2>();
  for (int64_t st = 0; st < steps; ++st) {
    if (st + 1 < steps)
      prefetch_step<RT>(x + (st + 1) * tile_bytes, o.ldx, base + (st + 1) * tile_runs * wstride,
                        wstride);
    load_x<Tiles, 0, RT>(x + st * tile_bytes, o.ldx);
    load_w<Tiles, 0, CT>(base + st * tile_runs * wstride, wstride);
    for_each_product<Tiles, RT, CT>();
  }
  if (tail > 0) {
    const int64_t k0 = steps * tile_bytes, bytes = tail * kg;
    std::memset(&s.x_tail, 0, sizeof s.x_tail);
    std::memset(&s.w_tail, 0, sizeof s.w_tail);
    for (int64_t r = 0; r < RT * tile_rows; ++r)
      std::memcpy(s.x_tail[r / tile_rows] + (r % tile_rows) * tile_bytes, x + r * o.ldx + k0,
                  static_cast<size_t>(bytes));
    for (int64_t c = 0; c < CT; ++c)
      for (int64_t q = 0; q < tail; ++q)
        std::memcpy(s.w_tail[c] + q * tile_bytes,
                    base + (steps * tile_runs + q) * wstride + c * tile_bytes, tile_bytes);
    Tiles::template load<x_tile>(s.x_tail[0], tile_bytes);
    if constexpr (RT == 2) Tiles::template load<x_tile + 1>(s.x_tail[1], tile_bytes);
    Tiles::template load<w_tile>(s.w_tail[0], tile_bytes);
    if constexpr (CT == 2) Tiles::template load<w_tile + 1>(s.w_tail[1], tile_bytes);
    for_each_product<Tiles, RT, CT>();
  }
  store_all<Tiles, RT, CT>(o, m, rows_end, col0, ncols, s);
}

// Rows [m0, m1), a whole number of 16-row tiles, against panel groups [g0, g1); rows from
// `rows_end` on (padding, when x was copied into whole tiles) are computed but not stored.
// Groups outside, row tiles inside: a group's weights (32 channels x K) stay in L2 while every
// row pair of the block passes over them.
template<class Tiles>
void rows_block(const int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1,
                int64_t rows_end = -1) {
  if (rows_end < 0) rows_end = m1;
  scratch s;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t gp = min64(gpn, o.panels - g * gpn), wstride = gp * pc * kg;
    const int8_t* base = o.packed + g * gpn * pc * o.k_padded;
    const int64_t col0 = g * group_cols, ncols = min64(gp * pc, o.n - col0);
    const bool two_cols = gp == 4; // panels come in pairs: 2 or 4 per group
    for (int64_t m = m0; m < m1;) {
      const bool two_rows = m1 - m >= 2 * tile_rows;
      if (two_rows && two_cols)
        group_tiles<Tiles, 2, 2>(o, m, rows_end, base, wstride, col0, ncols, s);
      else if (two_rows)
        group_tiles<Tiles, 2, 1>(o, m, rows_end, base, wstride, col0, ncols, s);
      else if (two_cols)
        group_tiles<Tiles, 1, 2>(o, m, rows_end, base, wstride, col0, ncols, s);
      else
        group_tiles<Tiles, 1, 1>(o, m, rows_end, base, wstride, col0, ncols, s);
      m += two_rows ? 2 * tile_rows : tile_rows;
    }
  }
}
} // namespace

} // namespace supernode::kernels::amx_driver
