// AVX-512 VNNI INT8 GEMM blocks on ZMM. vpdpbusd multiplies u8 by s8, and AVX-512 has no vpsignb
// to move signs with, so this path feeds x + 128 (x ^ 0x80, in [1, 255]) as the u8 operand and
// the packed weights unchanged as s8. Each four-product sum is at most 4 * 255 * 127 and is added
// to int32 without saturation; starting every sum at -128 * sum_k w (int8_weight::u8_compensation,
// made at load time) leaves exactly sum_k x * w. Partial sums stay within (128 + 255) * 127 * K,
// inside int32 up to K = 44,000, and beyond that the wrapping int32 adds still end on the exact
// sum whenever it fits int32 (as the reference's own sum must). Integer sums do not depend on
// their order, so the k blocking and the split of a sum over several accumulators change nothing:
// results are bit-identical to the portable, AVX2 and AVX-VNNI paths.

#include "kernels/arch/x86/avx512_kernels.hpp"
#include "kernels/kernel_isa.hpp"

#include <cstring>
#include <immintrin.h>
#include <utility>

namespace supernode::kernels::avx512_vnni {

namespace {
using avx2::int8_operands;
constexpr int64_t pc = avx2::int8_panel_cols, kg = avx2::int8_k_group,
                  gpn = avx2::int8_group_panels;
constexpr int64_t group_cols = gpn * pc;
constexpr int64_t zmm_cols = 2 * pc; // one ZMM of weights: a panel pair, 16 channels x 4 k

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// Rows per pass, and panel groups per chunk: their partial sums stay on the stack between k
// blocks while the biased x block of those rows is reused by every group of the chunk.
constexpr int64_t rows_per_pass = 24, chunk_groups = 16;
// 12 x 2 ZMM accumulators, 2 weight vectors and 1 broadcast: 27 of the 32 registers. Each
// weight load then feeds 12 vpdpbusd, which keeps a core with two 512-bit VNNI pipes (Zen 5)
// compute-bound where 8 rows left it waiting on loads and partial sums.
constexpr int max_tile_rows = 12;
// Bytes of biased x per k block. With several row tiles, K is cut into equal blocks of at most
// 384 runs of 4 k (the group's weights for a block stay in L1/L2 while both row tiles pass over
// it, and K = 2,816 takes two blocks, not three: each block boundary stores and reloads every
// partial sum); with one row tile (one pass, bandwidth-bound at small M) the block is as long
// as this buffer allows.
constexpr int64_t tile_k_block_runs = 384, x_block_bytes = rows_per_pass * tile_k_block_runs * kg;
// Software prefetch distance of a single streaming pass (2 KB in the AVX2 kernel; ZMM steps
// consume the stream twice as fast).
constexpr int64_t prefetch_distance = 4096;
// Whether a pass over a single row asks for its weights ahead too. On AMD it does not. At one
// row (every decode GEMV at batch 1, the experts with one token at larger batches, the lm_head)
// the loop is short enough for the core and its hardware prefetcher to run far ahead alone,
// and the requests only competed with them: on Zen 5, with each block call of `bench model
// --decode-only 150` picking either tile at random in one process, one-row blocks streamed
// 6-9 % faster per thread without them (four runs), and decode steps at batch 1 took 5-10 %
// less. Elsewhere it still does: round 1 found Intel's hardware prefetcher alone short on the
// 132 MB lm_head with the AVX2 kernel (gemm_int8_tiles.hpp), and no Intel machine has measured
// this one since. Passes of more rows always ask: each weight load waits behind more vpdpbusd,
// and the requests pay (two- and three-row blocks of batch-8 decode steps, the same A/B on Zen
// 5: 1-3 %; M = 8: 10-15 % in a driver streaming weights back to back).
const bool single_row_prefetch = !cpu_is_amd();

using avx512::to_float;

inline __m512i broadcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// MR rows x NZ ZMM columns (16 channels each) over kq runs of 4 k, with KS interleaved sets of
// accumulators (one or two rows have too few independent sums to hide vpdpbusd's latency).
// `xb` holds biased x for this k block, `part` the partial sums between blocks (row stride
// ldpart), `comp` the compensation that starts each sum in the first block, `ws` the weight's
// own channel scales from the tile's first column (read for the `ncols` that exist only).
template<int MR, int NZ, int KS, bool Prefetch = true>
void tile(const uint8_t* xb, int64_t ldxb, const int8_t* w, int64_t wstride, int64_t kq,
          const int8_t* pf, int64_t pf_step, int32_t* part, int64_t ldpart, const int32_t* comp,
          bool first, bool last, const float* xs, const float* ws, float* y, int64_t ldy,
          int64_t ncols) {
  __m512i acc[KS][MR][NZ];
#pragma GCC unroll 12
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) {
      acc[0][m][z] =
          _mm512_loadu_si512(first ? comp + z * zmm_cols : part + m * ldpart + z * zmm_cols);
#pragma GCC unroll 4
      for (int s = 1; s < KS; ++s) acc[s][m][z] = _mm512_setzero_si512();
    }
  auto step = [&](int s, int64_t q) {
    const int8_t* wq = w + q * wstride;
    if constexpr (Prefetch) { // see single_row_prefetch
      _mm_prefetch(reinterpret_cast<const char*>(pf + q * pf_step), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pf + q * pf_step + 64), _MM_HINT_T0);
    }
    __m512i wv[NZ];
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) wv[z] = _mm512_loadu_si512(wq + z * zmm_cols * kg);
#pragma GCC unroll 12
    for (int m = 0; m < MR; ++m) {
      const __m512i xv = broadcast4(xb + m * ldxb + q * kg);
#pragma GCC unroll 2
      for (int z = 0; z < NZ; ++z) acc[s][m][z] = _mm512_dpbusd_epi32(acc[s][m][z], xv, wv[z]);
    }
  };
  int64_t q = 0;
  for (; q + KS <= kq; q += KS)
#pragma GCC unroll 4
    for (int s = 0; s < KS; ++s) step(s, q + s);
  for (; q < kq; ++q) step(0, q);
#pragma GCC unroll 12
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) {
#pragma GCC unroll 4
      for (int s = 1; s < KS; ++s) acc[0][m][z] = _mm512_add_epi32(acc[0][m][z], acc[s][m][z]);
    }
  if (!last) {
#pragma GCC unroll 12
    for (int m = 0; m < MR; ++m)
#pragma GCC unroll 2
      for (int z = 0; z < NZ; ++z)
        _mm512_storeu_si512(part + m * ldpart + z * zmm_cols, acc[0][m][z]);
    return;
  }
  // Epilogue (float(acc) * x_scale) * w_scale, as gemm_int8_reference computes it.
#pragma GCC unroll 12
  for (int m = 0; m < MR; ++m) {
    const __m512 xsv = _mm512_set1_ps(xs[m]);
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) {
      const int64_t left = ncols - z * zmm_cols;
      if (left <= 0) continue;
      // Masked: the scales are the weight's own array, which ends at channel n.
      const __mmask16 lanes = left >= zmm_cols ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
      const __m512 f = _mm512_mul_ps(_mm512_mul_ps(to_float(acc[0][m][z]), xsv),
                                     _mm512_maskz_loadu_ps(lanes, ws + z * zmm_cols));
      _mm512_mask_storeu_ps(y + m * ldy + z * zmm_cols, lanes, f);
    }
  }
}

using tile_fn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t, const int8_t*,
                         int64_t, int32_t*, int64_t, const int32_t*, bool, bool, const float*,
                         const float*, float*, int64_t, int64_t);

// tile<MR, NZ, KS, Prefetch> for MR = 1 .. max_tile_rows, NZ = 1, 2; KS as the rows need.
template<int MR, int NZ, bool Prefetch = true>
constexpr tile_fn tile_with_latency_cover() {
  return tile < MR, NZ, MR == 1 ? 4 : MR == 2 ? 2 : 1, Prefetch > ;
}
template<int... R>
constexpr auto tile_table(std::integer_sequence<int, R...>) {
  struct table {
    tile_fn by_rows[2][sizeof...(R)];
  };
  return table{
      {{tile_with_latency_cover<R + 1, 1>()...}, {tile_with_latency_cover<R + 1, 2>()...}}};
}
constexpr auto tiles = tile_table(std::make_integer_sequence<int, max_tile_rows>{});

tile_fn pick_tile(int64_t mr, int64_t nz) {
  if (mr == 1 && !single_row_prefetch)
    return nz == 1 ? tile_with_latency_cover<1, 1, false>()
                   : tile_with_latency_cover<1, 2, false>();
  return tiles.by_rows[nz - 1][mr - 1];
}

// x ^ 0x80 for `rows` rows of `bytes` bytes (row stride ldx) into xb (row stride `bytes`).
void bias_rows(const int8_t* x, int64_t ldx, int64_t rows, int64_t bytes, uint8_t* xb) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < bytes; i += 64) {
      const int64_t left = bytes - i;
      const __mmask64 mask = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
      _mm512_mask_storeu_epi8(
          xb + r * bytes + i, mask,
          _mm512_xor_si512(_mm512_maskz_loadu_epi8(mask, x + r * ldx + i), flip));
    }
}

struct group_view {
  const int8_t* base; // the group's run 0
  int64_t wstride;    // bytes per run of 4 k
  int64_t zmms;       // ZMM columns (panel pairs): 1 or 2
  int64_t col0, ncols;
};

group_view view(const int8_operands& o, int64_t g) {
  const int64_t gp = min64(gpn, o.panels - g * gpn), col0 = g * group_cols;
  return {o.packed + g * gpn * pc * o.k_padded, gp * pc * kg, gp / 2, col0,
          min64(gp * pc, o.n - col0)};
}
// Asks for every cache line of [p, p + bytes).
void prefetch_lines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(c + i, _MM_HINT_T0);
}
} // namespace

void gemm_int8_block(const int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  const int64_t kq = o.k_padded / kg;
  alignas(64) uint8_t xb[x_block_bytes];
  alignas(64) int32_t part[rows_per_pass * chunk_groups * group_cols];
  for (int64_t r0 = m0; r0 < m1; r0 += rows_per_pass) {
    const int64_t r1 = min64(m1, r0 + rows_per_pass), rows = r1 - r0;
    // Up to 12 rows: a single tile per group streams its weights linearly. More: row tiles of
    // equal height (16 rows as 8 + 8, not 12 + 4) walk each k block in turn, K cut into equal
    // blocks of at most tile_k_block_runs (at least one run, so K = 0 still takes one pass).
    const bool streaming = rows <= max_tile_rows;
    const int64_t row_tiles = (rows + max_tile_rows - 1) / max_tile_rows;
    const int64_t mr_max = (rows + row_tiles - 1) / row_tiles;
    const int64_t runs = kq > 1 ? kq : 1;
    const int64_t k_blocks = (runs + tile_k_block_runs - 1) / tile_k_block_runs;
    const int64_t k_block =
        streaming ? x_block_bytes / (kg * rows) : (runs + k_blocks - 1) / k_blocks;
    for (int64_t gc0 = g0; gc0 < g1; gc0 += chunk_groups) {
      const int64_t gc1 = min64(g1, gc0 + chunk_groups), ldpart = (gc1 - gc0) * group_cols;
      // The chunk's compensation (read as each group's tiles start) and channel scales (read
      // by their epilogues) live after all the packed weights, outside the stream the tiles
      // walk: asked for up front, they arrive while the first group streams. Copying the
      // scales out at this point instead (a demand miss on each of their lines before any
      // weight was loaded) cost M = 1 GEMVs from memory 3-5 %.
      const int64_t first_col = gc0 * group_cols;
      prefetch_lines(o.u8_compensation + first_col, ldpart * int64_t{sizeof(int32_t)});
      prefetch_lines(o.w_scale + first_col,
                     min64(ldpart, o.n - first_col) * int64_t{sizeof(float)});
      for (int64_t kb = 0; kb < kq || kb == 0; kb += k_block) {
        const int64_t kn = min64(k_block, kq - kb), ldxb = kn * kg;
        const bool first = kb == 0, last = kb + kn >= kq;
        bias_rows(o.x + r0 * o.ldx + kb * kg, o.ldx, rows, ldxb, xb);
        for (int64_t g = gc0; g < gc1; ++g) {
          const group_view gv = view(o, g);
          const int8_t* block = gv.base + kb * gv.wstride;
          // The weights needed after this block: the next group's block, else the first
          // group's next block. One pass stays a fixed distance ahead instead; several passes
          // prefetch a share each while this block is reused from L1.
          const group_view next = view(o, g + 1 < gc1 ? g + 1 : gc0);
          const int8_t* next_block =
              g + 1 < gc1 ? next.base + kb * next.wstride : next.base + (kb + kn) * next.wstride;
          const int64_t slice = (kn * gv.wstride + row_tiles - 1) / row_tiles;
          int64_t pass = 0;
          for (int64_t m = r0; m < r1; ++pass) {
            const int64_t mr = min64(mr_max, r1 - m);
            const int8_t* pf =
                row_tiles == 1 ? block + prefetch_distance : next_block + pass * slice;
            const int64_t pf_step = row_tiles == 1 ? gv.wstride : slice / (kn > 0 ? kn : 1);
            pick_tile(mr, gv.zmms)(xb + (m - r0) * ldxb, ldxb, block, gv.wstride, kn, pf, pf_step,
                                   part + (m - r0) * ldpart + (g - gc0) * group_cols, ldpart,
                                   o.u8_compensation + gv.col0, first, last, o.x_scale + m,
                                   o.w_scale + gv.col0, o.y + m * o.ldy + gv.col0, o.ldy, gv.ncols);
            m += mr;
          }
        }
      }
    }
  }
}

} // namespace supernode::kernels::avx512_vnni
