#pragma once
// MLA attention over a paged latent cache. Each cached token holds [c_kv (kv_lora) | k_pe (rope)]
// where c_kv is already RMS-normed and k_pe already rotated. Every query is computed on its
// own, in a fixed key order, so results do not depend on batch composition or chunking.

#include "kernels/thread_pool.hpp"

#include <cstdint>
#include <span>

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
void mla_prefill(const mla_prefill_args& a, thread_pool& pool = thread_pool::shared());

// Absorbed MLA (decode): attention computed in the latent space.
//   q_latent [heads][kv_lora]  (q_nope · W_uk, absorbed)   q_pe [heads][rope]
//   out_latent [heads][kv_lora] = softmax(scale · (q_latent·c + q_pe·k_pe)) · c over all tokens
// of the view up to and including position `pos`.
struct mla_decode_args {
  const float* q_latent;
  const float* q_pe;
  latent_kv_view cache;
  int64_t pos, heads;
  float softmax_scale;
  float* out_latent;
};
void mla_decode(const mla_decode_args& a);

} // namespace supernode::kernels
