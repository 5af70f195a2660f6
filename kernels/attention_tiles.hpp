#pragma once
// The flash-attention tile of MLA prefill, compiled once per instruction set from one source
// (attention_tiles_body.hpp): portable C++, AVX2, AVX-512, and AVX-512 BF16 for the scores.
// Keys come in blocks of 16 aligned to position 0, each block packed transposed (lane = key),
// so a score is one running sum acc = acc + q[d] * k[d] over d = 0..qk-1 in its lane. Every
// query runs an online softmax over steps of step_blocks blocks (128 keys) aligned to position 0,
// in order: its running max moves once per step, so the horizontal max, the branch and the
// rescaling of its output are paid once per 128 keys rather than per 16. A query's result
// therefore depends only on its own position, query and keys: not on the tile, batch, chunk or
// thread.
// The FP32 paths sum scores and values with fused multiply-adds (explicit, one rounding each),
// use plain IEEE operations everywhere else (no contraction by the compiler) and one exp of
// their own, so portable, AVX2 and AVX-512 give the same bits.
//
// As in avx2_kernels.hpp, the units see plain pointers and sizes only.

#include "kernels/vector_exp.hpp"    // the units' exp, one copy per instruction set
#include "kernels/vector_memory.hpp" // the units' loads and stores

#include <cstddef>
#include <cstdint>
#include <vector>

namespace supernode::kernels::attention_tiles {

inline constexpr int64_t key_block = 16;  // keys per packed block: one 16-lane vector
inline constexpr int64_t step_blocks = 8; // blocks per step of the online softmax
inline constexpr int64_t max_tile_queries = 32;

struct prefill_operands {
  const float* q;         // query i of this head at q + i * q_stride, qk floats
  const uint32_t* q_bf16; // the same queries as bf16 pairs (BF16 path only), qk_pairs per query
  int64_t q_stride, q_bf16_stride, qk;
  const float* kt;         // this head's packed K^T: block b at kt + b * qk * 16, [qk][16]
  const uint32_t* kt_bf16; // BF16 path: block b at kt_bf16 + b * qk_pairs * 16, [qk_pairs][16]
  int64_t qk_pairs;        // ceil(qk / 2)
  const float* vt;         // this head's packed values: block b at vt + b * 16 * vd, [16][vd]
  int64_t vd;
  int64_t first_pos; // position of query 0
  int64_t i0, rows;  // the tile: queries i0 .. i0 + rows - 1 (rows <= max_tile_queries)
  float scale;
  float* out; // query i's output at out + i * out_stride, vd floats
  int64_t out_stride;
  // Packing on the fly (FP32 scores only; kt and vt are then unused): pack(pack_context, b,
  // keys, values) writes block b as kt and vt would hold it, just before the tile uses it, into
  // the scratch of its step: block_keys + j * qk * 16 and block_values + j * 16 * vd for the
  // step's block j < step_blocks. For a tile that is a whole call (a short chunk), this keeps a
  // step's blocks in L1 instead of packing every key to memory first; the numbers are the same.
  void (*pack)(const void* pack_context, int64_t b, float* keys, float* values);
  const void* pack_context;
  float* block_keys;
  float* block_values;
};

namespace portable {
void prefill_tile(const prefill_operands& o);
}
namespace avx2 {
void prefill_tile(const prefill_operands& o);
}
namespace avx512 {
void prefill_tile(const prefill_operands& o);
}
// Scores with vdpbf16ps from bf16 queries and keys (FP32 sums); the rest as the FP32 paths.
namespace avx512_bf16 {
void prefill_tile(const prefill_operands& o);
}

} // namespace supernode::kernels::attention_tiles
