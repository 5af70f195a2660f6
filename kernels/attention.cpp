#include "kernels/attention.hpp"

#include "kernels/attention_decode.hpp"
#include "kernels/attention_tiles.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/kernel_isa.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace supernode::kernels {

namespace {
using tile_fn = void (*)(const attention_tiles::prefill_operands&);

std::atomic<attention_scores>& scores_slot() {
  static std::atomic<attention_scores> slot{[] {
    const char* env = std::getenv("SUPERNODE_ATTENTION_SCORES");
    return env && std::strcmp(env, "bf16") == 0 ? attention_scores::bf16 : attention_scores::fp32;
  }()};
  return slot;
}

bool bf16_runs() {
  return active_attention_scores() == attention_scores::bf16 && attention_bf16_supported() &&
         kernel_isa_has_avx512(active_kernel_isa());
}

tile_fn fp32_tile() {
#if defined(__x86_64__)
  const kernel_isa isa = active_kernel_isa();
  if (kernel_isa_has_avx512(isa)) return attention_tiles::avx512::prefill_tile;
  if (kernel_isa_has_avx2(isa)) return attention_tiles::avx2::prefill_tile;
#endif
  return attention_tiles::portable::prefill_tile;
}

// Round to nearest even; a NaN stays a (quiet) NaN.
uint16_t to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Two values as one dword of bf16 (`lo` in the low half): vdpbf16ps pairs the halves.
uint32_t bf16_pair(float lo, float hi) {
  return static_cast<uint32_t>(to_bf16(lo)) | (static_cast<uint32_t>(to_bf16(hi)) << 16);
}

// Elements 2d and 2d+1 of `qk` values `stride` floats apart (0 past the end).
uint32_t bf16_pair_at(const float* x, int64_t stride, int64_t qk, int64_t d) {
  return bf16_pair(x[2 * d * stride], 2 * d + 1 < qk ? x[(2 * d + 1) * stride] : 0.0f);
}

// Key block `b` of head `h`, transposed: column `lane` holds key 16 b + lane, zeros past the
// last key. The nope part comes from the expanded keys, the rope part from the cache. Its values
// go to `vt`, one row per key: rows of one head lie heads * (nope + v) floats apart in `kv`, a
// stride that maps every row of a block to the same L1 set.
void pack_block(const mla_prefill_args& a, int64_t h, int64_t b, float* kt, float* vt) {
  const int64_t qk = a.nope + a.rope, kvw = a.nope + a.v, n_keys = a.first_pos + a.n_queries;
  constexpr int64_t lanes = attention_tiles::key_block;
  for (int64_t lane = 0; lane < lanes; ++lane) {
    const int64_t t = b * lanes + lane;
    float* v = vt + lane * a.v;
    if (t >= n_keys) {
      for (int64_t d = 0; d < qk; ++d) kt[d * lanes + lane] = 0.0f;
      std::fill(v, v + a.v, 0.0f);
      continue;
    }
    const float* k = a.kv + (t * a.heads + h) * kvw;
    const float* kpe = a.cache.token(t) + a.cache.kv_lora;
    for (int64_t d = 0; d < a.nope; ++d) kt[d * lanes + lane] = k[d];
    for (int64_t d = 0; d < a.rope; ++d) kt[(a.nope + d) * lanes + lane] = kpe[d];
    std::copy_n(k + a.nope, a.v, v);
  }
}

void pack_keys_bf16(const float* kt, int64_t qk, uint32_t* out) {
  constexpr int64_t lanes = attention_tiles::key_block;
  for (int64_t d = 0; 2 * d < qk; ++d)
    for (int64_t lane = 0; lane < lanes; ++lane)
      out[d * lanes + lane] = bf16_pair_at(kt + lane, lanes, qk, d);
}
// The packed keys and values of one call, kept by the calling thread for the next call: a
// short chunk after a long prefix packs every key for a few queries, and a fresh allocation
// (page faults, zeroing) would cost as much as the attention itself. A buffer past 64 MB is
// freed when its call ends instead of kept. Every element a call reads it has
// written, so the buffers are never cleared.
class packing_buffers {
public:
  static packing_buffers& of_this_thread() {
    thread_local packing_buffers buffers;
    return buffers;
  }
  // At the end of a call: lets go of what is too large to keep.
  void trim() {
    floats_.trim();
    pairs_.trim();
  }
  float* floats(int64_t n) { return floats_.at_least(n); }
  uint32_t* pairs(int64_t n) { return pairs_.at_least(n); }

private:
  template<class T>
  struct buffer {
    std::unique_ptr<T[]> data;
    size_t size = 0;
    T* at_least(int64_t n) {
      if (static_cast<size_t>(n) > size) {
        data.reset(new T[static_cast<size_t>(n)]);
        size = static_cast<size_t>(n);
      }
      return data.get();
    }
    void trim() {
      if (size * sizeof(T) > (size_t{64} << 20)) data.reset(), size = 0;
    }
  };
  buffer<float> floats_;
  buffer<uint32_t> pairs_;
};
} // namespace

bool attention_bf16_supported() {
  return kernel_isa_avx512_bf16_supported();
}

attention_scores active_attention_scores() {
  return scores_slot().load(std::memory_order_relaxed);
}

void set_attention_scores(attention_scores s) {
  scores_slot().store(s, std::memory_order_relaxed);
}

namespace {
// One head of a call whose queries fit one tile: the tile packs each key block as it reaches it.
struct head_packing {
  const mla_prefill_args* a;
  int64_t h;
};
void pack_head_block(const void* context, int64_t b, float* keys, float* values) {
  const auto& p = *static_cast<const head_packing*>(context);
  pack_block(*p.a, p.h, b, keys, values);
}

void mla_prefill_one_tile(const mla_prefill_args& a, thread_pool& pool) {
  const int64_t qk = a.nope + a.rope;
  constexpr int64_t lanes = attention_tiles::key_block,
                    step_keys = attention_tiles::step_blocks * lanes;
  const auto run = fp32_tile();
  pool.parallel_for(a.heads, [&](int64_t h) {
    // The calling thread's buffers, or the worker's own: each task owns its thread's.
    float* scratch = packing_buffers::of_this_thread().floats((qk + a.v) * step_keys);
    const head_packing context{&a, h};
    attention_tiles::prefill_operands o{};
    o.q = a.q + h * qk;
    o.q_stride = a.heads * qk;
    o.qk = qk;
    o.qk_pairs = (qk + 1) / 2;
    o.vd = a.v;
    o.first_pos = a.first_pos;
    o.i0 = 0;
    o.rows = a.n_queries;
    o.scale = a.softmax_scale;
    o.out = a.out + h * a.v;
    o.out_stride = a.heads * a.v;
    o.pack = pack_head_block;
    o.pack_context = &context;
    o.block_keys = scratch;
    o.block_values = scratch + qk * step_keys;
    run(o);
  });
}
} // namespace

void mla_prefill(const mla_prefill_args& a, thread_pool& pool) {
  constexpr int64_t lanes = attention_tiles::key_block, tile = attention_tiles::max_tile_queries;
  const int64_t qk = a.nope + a.rope, qk_pairs = (qk + 1) / 2, n_keys = a.first_pos + a.n_queries;
  const int64_t blocks = (n_keys + lanes - 1) / lanes;
  const bool bf16 = bf16_runs();
  // A short chunk (one tile of queries per head): nothing to share between tiles, so each head's
  // tile packs its blocks as it goes instead of every key being packed to memory first.
  if (!bf16 && a.n_queries <= tile) return mla_prefill_one_tile(a, pool);
  // Keys and values are packed once per call, so every tile of queries reads its blocks
  // contiguously.
  auto& buffers = packing_buffers::of_this_thread();
  float* kt = buffers.floats(a.heads * blocks * (qk + a.v) * lanes);
  float* vt = kt + a.heads * blocks * qk * lanes;
  uint32_t* kt_bf16 = bf16 ? buffers.pairs(a.heads * blocks * qk_pairs * lanes) : nullptr;
  pool.parallel_for(a.heads * blocks, [&](int64_t task) {
    const int64_t h = task / blocks, b = task % blocks;
    float* block = kt + (h * blocks + b) * qk * lanes;
    pack_block(a, h, b, block, vt + (h * blocks + b) * lanes * a.v);
    if (bf16) pack_keys_bf16(block, qk, kt_bf16 + (h * blocks + b) * qk_pairs * lanes);
  });
  std::vector<uint32_t> q_bf16(bf16 ? a.n_queries * a.heads * qk_pairs : 0);
  for (int64_t r = 0; bf16 && r < a.n_queries * a.heads; ++r)
    for (int64_t d = 0; d < qk_pairs; ++d)
      q_bf16[r * qk_pairs + d] = bf16_pair_at(a.q + r * qk, 1, qk, d);

  const tile_fn run = bf16 ? attention_tiles::avx512_bf16::prefill_tile : fp32_tile();
  const int64_t tiles = (a.n_queries + tile - 1) / tile;
  // The longest tiles (latest queries) first, so the last tasks to start are the short ones.
  pool.parallel_for(a.heads * tiles, [&](int64_t task) {
    const int64_t h = task % a.heads, i0 = (tiles - 1 - task / a.heads) * tile;
    attention_tiles::prefill_operands o{};
    o.q = a.q + h * qk;
    o.q_stride = a.heads * qk;
    o.q_bf16 = bf16 ? q_bf16.data() + h * qk_pairs : nullptr;
    o.q_bf16_stride = a.heads * qk_pairs;
    o.qk = qk;
    o.qk_pairs = qk_pairs;
    o.kt = kt + h * blocks * qk * lanes;
    o.kt_bf16 = bf16 ? kt_bf16 + h * blocks * qk_pairs * lanes : nullptr;
    o.vt = vt + h * blocks * lanes * a.v;
    o.vd = a.v;
    o.first_pos = a.first_pos;
    o.i0 = i0;
    o.rows = std::min(tile, a.n_queries - i0);
    o.scale = a.softmax_scale;
    o.out = a.out + h * a.v;
    o.out_stride = a.heads * a.v;
    run(o);
  });
  buffers.trim();
}

void mla_decode(const mla_decode_args& a) {
#if defined(__x86_64__)
  const kernel_isa isa = active_kernel_isa();
  if (kernel_isa_has_avx512(isa)) return attention_decode::avx512::mla_decode(a);
  if (kernel_isa_has_avx2(isa)) return attention_decode::avx2::mla_decode(a);
#endif
  attention_decode::portable::mla_decode(a);
}

std::vector<float> mla_transpose_values(const float* kv_b, int64_t heads, int64_t nope, int64_t v,
                                        int64_t kv_lora) {
  std::vector<float> t(static_cast<size_t>(heads * kv_lora * v));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < v; ++j)
      for (int64_t c = 0; c < kv_lora; ++c)
        t[(h * kv_lora + c) * v + j] = kv_b[(h * (nope + v) + nope + j) * kv_lora + c];
  return t;
}

namespace {
// Heads per task of the latent step for n tokens on `threads`. The heads of a task share one
// pass over their token's cache, which at a long context no longer fits L2, so tasks are as
// few as keep every thread busy: at least one per thread, and an even spread when that takes
// at most twice as many. A token alone on two threads in four tasks of two heads read its
// cache twice per thread, and its layers ran 3-11 % slower at 1,000 keys (`bench model
// --decode-only 1000 --batch 1`) than in two tasks of four; three tokens take six tasks of
// four heads rather than three of eight, which would leave one thread idle for a third.
int64_t heads_per_decode_task(int64_t n, int64_t threads, int64_t heads) {
  auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t fewest = std::clamp<int64_t>(ceil_div(threads, n), 1, heads);
  const int64_t most = std::clamp<int64_t>(ceil_div(2 * threads, n), 1, heads);
  for (int64_t wanted = fewest; wanted <= most; ++wanted) {
    const int64_t per_group = ceil_div(heads, wanted);
    if (n * ceil_div(heads, per_group) % threads == 0) return per_group;
  }
  return ceil_div(heads, fewest);
}
} // namespace

void mla_decode_step(const mla_decode_step_args& a, thread_pool& pool) {
  const int64_t n = static_cast<int64_t>(a.tokens.size()), heads = a.heads, lora = a.kv_lora,
                qk = a.nope + a.rope, kvw = a.nope + a.v;
  if (n == 0) return;
  // q_latent and out_latent of every token, head-major ([heads][n][lora]): a head's rows for all
  // tokens are contiguous, where a token-major stride of a multiple of 4 KB would put them all
  // in the same few L1 sets. The calling thread's buffers, reused (a
  // fresh quarter-megabyte per layer at 32 tokens costs more in page faults than the step); the
  // tasks reach them through these references, as inside a task the thread_local names would be
  // the worker's own.
  thread_local std::vector<float> q_lat_buffer, o_lat_buffer;
  auto& q_lat = q_lat_buffer;
  auto& o_lat = o_lat_buffer;
  q_lat.assign(static_cast<size_t>(heads * n * lora), 0.0f);
  o_lat.resize(static_cast<size_t>(heads * n * lora));
  // q_nope · W_uk, one head per task.
  // Each element of each token is one chain of rounded multiplies and adds, in row order.
  pool.parallel_for(heads, [&](int64_t h) {
    for (int64_t i = 0; i < n; ++i)
      add_weighted_rows(a.w.kv_b + h * kvw * lora, a.nope, lora, a.tokens[i].q + h * qk,
                        q_lat.data() + (h * n + i) * lora);
  });
  // The latent step, in tasks of (token, heads).
  const int64_t per_group = heads_per_decode_task(n, pool.size(), heads);
  const int64_t groups = (heads + per_group - 1) / per_group; // none of them empty
  pool.parallel_for(n * groups, [&](int64_t task) {
    const int64_t i = task / groups, h0 = task % groups * per_group;
    const int64_t hn = std::min(per_group, heads - h0);
    const auto& tok = a.tokens[i];
    mla_decode({q_lat.data() + (h0 * n + i) * lora, tok.q + h0 * qk + a.nope, tok.cache, tok.pos,
                hn, a.softmax_scale, o_lat.data() + (h0 * n + i) * lora, qk, n * lora});
  });
  // out_latent · W_uv, one head per task, straight into each token's output (held in
  // registers while the rows are added, so its stride does not matter).
  pool.parallel_for(heads, [&](int64_t h) {
    for (int64_t i = 0; i < n; ++i) {
      float* out = a.tokens[i].out + h * a.v;
      std::fill_n(out, a.v, 0.0f);
      add_weighted_rows(a.w.w_uv_t + h * lora * a.v, lora, a.v, o_lat.data() + (h * n + i) * lora,
                        out);
    }
  });
}

} // namespace supernode::kernels
