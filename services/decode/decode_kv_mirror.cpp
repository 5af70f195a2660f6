#include "services/decode/decode_kv_mirror.hpp"

#include <algorithm>

namespace supernode::services {

namespace {
// The prompt, then the first `generated` generated tokens.
std::vector<int32_t> prompt_and(const decode_sequence& s, int64_t generated) {
  std::vector<int32_t> tokens = s.spec.prompt;
  tokens.insert(tokens.end(), s.generated.begin(), s.generated.begin() + generated);
  return tokens;
}
} // namespace

int64_t mirror_full_blocks(decode_sequence& s, ems::context_cache_client& cache,
                           const model::kv_block_pool& pool) {
  const auto prompt = static_cast<int64_t>(s.spec.prompt.size());
  const int64_t block = cache.block_tokens();
  const int64_t with_kv =
      std::min(s.table.tokens(), prompt + static_cast<int64_t>(s.generated.size()));
  const int64_t full = with_kv / block;
  const int64_t from = std::max(s.mirrored_blocks, prompt / block);
  if (full <= from) return 0;
  cache.store_generated_async(prompt_and(s, with_kv - prompt), prompt, from, s.table, pool);
  s.mirrored_blocks = full;
  return full - from;
}

int64_t load_mirrored_kv(decode_sequence& s, ems::context_cache_client& cache,
                         model::kv_block_pool& pool) {
  const auto& generated = s.spec.generated;
  if (generated.size() < 2) return 0; // the one generated token has no KV
  const auto prompt = static_cast<int64_t>(s.spec.prompt.size());
  std::vector<int32_t> tokens = s.spec.prompt;
  tokens.insert(tokens.end(), generated.begin(), generated.end() - 1);
  const auto hit = cache.load_generated(tokens, prompt, s.table, pool);
  if (hit.hit_blocks == 0) return 0;
  s.mirrored_blocks = hit.first_block + hit.hit_blocks;
  s.loaded_generated = s.mirrored_blocks * cache.block_tokens() - prompt;
  return hit.hit_blocks;
}

} // namespace supernode::services
