#pragma once
// Context-cache keys (§4.4.2): a prompt's KV is cached in blocks of B tokens, and block i's key
// chains the key of block i-1 with block i's tokens and the model's id and version:
//   key_i = H(key_{i-1}, tokens[i*B, (i+1)*B), model id + version)
// so a key names a whole prefix, not a block in isolation: two prompts share block i's key
// exactly when they share every token up to its end, and a new model version shares nothing.
// Only full blocks get keys (a partial last block is recomputed).

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::services::ems {

// Keys of the full blocks of `tokens`, in order. Throws std::invalid_argument when
// block_tokens < 1 or the model string is empty.
std::vector<uint64_t> prefix_block_keys(std::string_view model_and_version,
                                        std::span<const int32_t> tokens, int64_t block_tokens);

// The model string KV made by the decode arithmetic is keyed under: the model's, salted with
// the prompt length (the position where decode arithmetic starts), for prefix_block_keys. So a
// decode-made block (one holding a position at or past the prompt's end) never has a prompt
// prefix's key, and no prefill ever loads it: decode KV differs from prefill KV of the same
// tokens in its last bits, and serving one for the other would break bit-identical outputs.
std::string decode_kv_model_key(std::string_view model_and_version, int64_t prompt_tokens);

// The number of leading blocks whose keys `cached` reports present: the longest cached prefix,
// in blocks. Stops at the first miss (a later hit cannot be used without the blocks before it).
size_t longest_cached_prefix(std::span<const uint64_t> keys,
                             const std::function<bool(uint64_t)>& cached);

// The storage key of a block ("ctx/<16 hex digits>"), for the block store's (ns, key) space.
std::string context_block_name(uint64_t key);

} // namespace supernode::services::ems
