#pragma once
// MLA attention over a paged latent cache. Each cached token holds [c_kv (kv_lora) | k_pe (rope)]
// where c_kv is already RMS-normed and k_pe already rotated. Every query is computed on its
// own, in a fixed key order, so results do not depend on batch composition or chunking.

#include "kernels/thread_pool.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace supernode::kernels {

// A read-only view of one sequence's latent KV in one layer: token t lives in
// blocks[t / block_size] at row t % block_size, rows of (kv_lora + rope) floats.
struct latent_kv_view {
  std::span<const float* const> blocks;
  int64_t block_size = 0;
  int64_t kv_lora = 0;
  int64_t rope = 0;
  int64_t length = 0; // tokens present

  const float* token(int64_t t) const {
    return blocks[t / block_size] + (t % block_size) * (kv_lora + rope);
  }
};

// Non-absorbed MLA (prefill): queries at positions first_pos .. first_pos + n_queries - 1.
//   q     [n_queries][heads][nope + rope]   (k_pe part already rotated)
//   kv    [n_keys][heads][nope + v]          keys/values expanded from the latent cache
//   k_pe  latent view, for the shared rotated key part (n_keys = first_pos + n_queries)
//   out   [n_queries][heads][v]
// Query i attends causally to keys 0 .. first_pos + i.
struct mla_prefill_args {
  const float* q;
  const float* kv;
  latent_kv_view cache;
  int64_t n_queries, first_pos, heads, nope, rope, v;
  float softmax_scale;
  float* out;
};
// Flash-attention tiles (attention_tiles.hpp): bit-identical on the portable, AVX2 and AVX-512
// paths (chosen by kernel_isa), and the same for a query whatever chunk or batch it is in.
void mla_prefill(const mla_prefill_args& a, thread_pool& pool = thread_pool::shared());

// How prefill attention computes its scores q·k. fp32 is the default and the reference. bf16
// (vdpbf16ps, on CPUs with AVX-512 BF16 while an AVX-512 kernel path is active; elsewhere it
// stays fp32) rounds queries and keys to bf16: deterministic and chunk-invariant too, but not
// the same bits as fp32, nor across CPUs whose vdpbf16ps rounds differently.
// SUPERNODE_ATTENTION_SCORES=bf16 selects it at start-up.
enum class attention_scores { fp32, bf16 };
bool attention_bf16_supported();
attention_scores active_attention_scores();
// Not meant to race running kernels (tests and benchmarks switch it between calls).
void set_attention_scores(attention_scores s);

// Absorbed MLA (decode): attention computed in the latent space.
//   q_latent [heads][kv_lora]  (q_nope · W_uk, absorbed)   q_pe [heads][rope]
//   out_latent [heads][kv_lora] = softmax(scale · (q_latent·c + q_pe·k_pe)) · c over all tokens
// of the view up to and including position `pos`. Rows of q_pe are q_pe_stride apart, and rows
// of q_latent and out_latent latent_stride apart (0: packed). The heads share each pass over the
// cache; every path gives the same bits, whatever heads a call holds (attention_decode.hpp).
struct mla_decode_args {
  const float* q_latent;
  const float* q_pe;
  latent_kv_view cache;
  int64_t pos, heads;
  float softmax_scale;
  float* out_latent;
  int64_t q_pe_stride = 0, latent_stride = 0;
};
void mla_decode(const mla_decode_args& a);

// A whole decode step's attention, absorbed: for every token, q_latent = q_nope · W_uk per head,
// the latent-space step above, and out = out_latent · W_uv. Each head's W_uk and W_uv are read
// once for all the step's tokens. A token's result depends on its own query and cache only.
struct mla_decode_token {
  const float* q;       // [heads][nope + rope], the rope part rotated
  latent_kv_view cache; // its sequence's latent cache, through position pos
  int64_t pos;
  float* out; // [heads][v]
};
struct mla_absorbed_weights {
  const float* kv_b;   // [heads * (nope + v)][kv_lora]: each head's W_uk rows, then its W_uv rows
  const float* w_uv_t; // [heads][kv_lora][v]: W_uv transposed (mla_transpose_values)
};
struct mla_decode_step_args {
  std::span<const mla_decode_token> tokens;
  mla_absorbed_weights w;
  int64_t heads, nope, rope, v, kv_lora;
  float softmax_scale;
};
void mla_decode_step(const mla_decode_step_args& a, thread_pool& pool = thread_pool::shared());
// w_uv_t for mla_absorbed_weights, from kv_b as laid out above.
std::vector<float> mla_transpose_values(const float* kv_b, int64_t heads, int64_t nope, int64_t v,
                                        int64_t kv_lora);

} // namespace supernode::kernels
