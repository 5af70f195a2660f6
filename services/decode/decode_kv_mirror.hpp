#pragma once
// The KV a decode instance's arithmetic made, mirrored into the EMS pool ([ems]
// store_decode_kv) and loaded back when a request resumes on another decode instance after
// its first one died. Blocks are context-cache blocks keyed under the decode salt
// (prefix_keys.hpp's decode_kv_model_key): the block holding the prompt's end and every later
// one; the blocks wholly inside the prompt are the prefill's, keyed and stored as prompts are.
// Loaded KV is the exact bytes the decode arithmetic wrote for the same prompt and tokens, and
// the resumed step feeds only what follows it, so a resume is bit-identical either way.

#include "services/decode/decode_batch.hpp"
#include "services/ems/context_cache_client.hpp"

namespace supernode::services {

// Stores the blocks of `s` whose every position has KV in its table and that are not in the
// pool yet (s.mirrored_blocks on), without waiting for the pool. Returns how many it handed over.
int64_t mirror_full_blocks(decode_sequence& s, ems::context_cache_client& cache,
                           const model::kv_block_pool& pool);

// For a resumed sequence (spec.generated set) whose prompt KV is in its table: loads the
// longest run of its decode-made blocks the pool has into the table and sets
// s.loaded_generated to the generated tokens they cover (never the last one: its KV never
// existed). A miss or a failure loads nothing (the resume feeds every generated token).
// Returns the blocks loaded.
int64_t load_mirrored_kv(decode_sequence& s, ems::context_cache_client& cache,
                         model::kv_block_pool& pool);

} // namespace supernode::services
