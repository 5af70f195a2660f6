#pragma once
// The context cache (§4.4.2) as a prefill instance uses it: a prompt's latent KV is cached in
// blocks of B tokens (B a multiple of the KV pool's block size), block i under the chained key
// of prefix_keys.hpp, in the pool's context namespace. Before computing, the instance looks up
// the longest cached prefix and loads it into the prompt's KV blocks, then computes only the
// suffix; after the first token has left, it stores the blocks the pool did not have. At least
// one prompt token is always computed (its logits give the first token). Loaded KV is the exact
// bytes some prefill computed for the same tokens, and every kernel is batch-invariant, so the
// outputs are bit-identical with the cache off, cold or hot.

#include "model/kv_cache.hpp"
#include "services/ems/pool_client.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace supernode::services::ems {

struct context_lookup {
  std::vector<uint64_t> keys;             // every full block of the tokens looked up
  int64_t first_block = 0;                // the cache block kv[0] is
  int64_t hit_blocks = 0;                 // cache blocks loaded (keys[first_block, +hit_blocks))
  std::vector<std::vector<std::byte>> kv; // their bytes, in order
  std::string error;                      // why the lookup failed, when it did (a miss)
  int64_t hit_tokens(int64_t block_tokens) const { return hit_blocks * block_tokens; }
};

class context_cache {
public:
  // `model` names the model, its version and precision: KV from another never matches.
  context_cache(pool_client& pool, std::string ns, std::string model, int64_t block_tokens,
                const model::kv_block_layout& layout);

  int64_t block_tokens() const { return block_tokens_; }
  // Bytes of one cache block: block_tokens / layout.block_size KV blocks.
  size_t cache_block_bytes() const;

  // The longest usable cached prefix of `prompt`: blocks present in order, their bytes of the
  // right size, and at least one token left to compute. Never throws; a failure is a miss.
  context_lookup lookup(std::span<const int32_t> prompt);
  // The longest run of decode-made blocks of `tokens` (a prompt of `prompt_tokens` and the
  // generated tokens that have KV) in the pool, from the block holding position prompt_tokens
  // on: what store_generated stored. Never throws; a failure is a miss.
  context_lookup lookup_generated(std::span<const int32_t> tokens, int64_t prompt_tokens);
  // Copies the loaded blocks into their KV blocks of `table`.
  void load_into(const context_lookup& hit, const model::kv_block_table& table,
                 model::kv_block_pool& pool) const;
  // Exports the full blocks of `tokens` from block `from_block` on (the earlier ones are in the
  // pool already) and puts them with `put`, which may send them asynchronously; returns how
  // many were handed over. `table` must hold the KV of every token of those blocks.
  using put_fn = std::function<void(const std::string& ns, std::span<const pool_put> items)>;
  size_t store(std::span<const int32_t> tokens, int64_t from_block,
               const model::kv_block_table& table, const model::kv_block_pool& pool,
               const put_fn& put) const;
  // store for KV the decode arithmetic made after a prompt of `prompt_tokens`: under the keys
  // of prefix_keys.hpp's decode_kv_model_key, which no prompt prefix has.
  size_t store_generated(std::span<const int32_t> tokens, int64_t prompt_tokens, int64_t from_block,
                         const model::kv_block_table& table, const model::kv_block_pool& pool,
                         const put_fn& put) const;

private:
  // Fills out.kv with the longest run of blocks keys[from, end) present in the pool.
  void fetch_run(context_lookup& out, size_t from, size_t end);
  size_t store_keyed(std::span<const uint64_t> keys, int64_t from_block,
                     const model::kv_block_table& table, const model::kv_block_pool& pool,
                     const put_fn& put) const;

  pool_client& pool_;
  std::string ns_, model_;
  int64_t block_tokens_;
  model::kv_block_layout layout_;
};

} // namespace supernode::services::ems
