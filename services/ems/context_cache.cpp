#include "services/ems/context_cache.hpp"

#include "services/ems/prefix_keys.hpp"

#include <stdexcept>

namespace supernode::services::ems {

context_cache::context_cache(pool_client& pool, std::string ns, std::string model,
                             int64_t block_tokens, const model::kv_block_layout& layout)
    : pool_(pool), ns_(std::move(ns)), model_(std::move(model)), block_tokens_(block_tokens),
      layout_(layout) {
  if (block_tokens < 1 || block_tokens % layout.block_size != 0)
    throw std::invalid_argument("context cache block of " + std::to_string(block_tokens) +
                                " tokens is not a multiple of the KV block size " +
                                std::to_string(layout.block_size));
}

size_t context_cache::cache_block_bytes() const {
  return static_cast<size_t>(block_tokens_ / layout_.block_size) * layout_.block_bytes();
}

context_lookup context_cache::lookup(std::span<const int32_t> prompt) {
  context_lookup out;
  out.keys = prefix_block_keys(model_, prompt, block_tokens_);
  // The last prompt token is always computed: its hidden state gives the first token.
  const auto usable = std::min<size_t>(out.keys.size(), (prompt.size() - 1) / block_tokens_);
  fetch_run(out, 0, usable);
  return out;
}

context_lookup context_cache::lookup_generated(std::span<const int32_t> tokens,
                                               int64_t prompt_tokens) {
  context_lookup out;
  out.keys = prefix_block_keys(decode_kv_model_key(model_, prompt_tokens), tokens, block_tokens_);
  fetch_run(out, static_cast<size_t>(prompt_tokens / block_tokens_), out.keys.size());
  return out;
}

void context_cache::fetch_run(context_lookup& out, size_t from, size_t end) {
  out.first_block = static_cast<int64_t>(from);
  if (end <= from) return;
  const auto keys = std::span(out.keys).subspan(from, end - from);
  std::vector<std::string> names;
  for (auto key : keys) names.push_back(context_block_name(key));
  const auto present = pool_.exists(ns_, names);
  const size_t prefix =
      longest_cached_prefix(keys, [&, i = size_t{0}](uint64_t) mutable { return present[i++]; });
  if (prefix == 0) return;
  names.resize(prefix);
  auto got = pool_.get(ns_, names);
  if (got.errors > 0) out.error = got.first_error;
  const size_t want = cache_block_bytes();
  for (auto& block : got.blocks) {
    // Evicted since the lookup, or not a block of this layout: the run ends here.
    if (!block || block->size() != want) break;
    out.kv.push_back(std::move(*block));
  }
  out.hit_blocks = static_cast<int64_t>(out.kv.size());
}

void context_cache::load_into(const context_lookup& hit, const model::kv_block_table& table,
                              model::kv_block_pool& pool) const {
  const int64_t per = block_tokens_ / layout_.block_size;
  const size_t bytes = layout_.block_bytes();
  for (int64_t b = 0; b < hit.hit_blocks; ++b) {
    const auto in = std::span(hit.kv[b]);
    for (int64_t j = 0; j < per; ++j)
      pool.import_block_bytes(table.blocks().at((hit.first_block + b) * per + j),
                              in.subspan(j * bytes, bytes));
  }
}

size_t context_cache::store(std::span<const int32_t> tokens, int64_t from_block,
                            const model::kv_block_table& table, const model::kv_block_pool& pool,
                            const put_fn& put) const {
  return store_keyed(prefix_block_keys(model_, tokens, block_tokens_), from_block, table, pool,
                     put);
}

size_t context_cache::store_generated(std::span<const int32_t> tokens, int64_t prompt_tokens,
                                      int64_t from_block, const model::kv_block_table& table,
                                      const model::kv_block_pool& pool, const put_fn& put) const {
  return store_keyed(
      prefix_block_keys(decode_kv_model_key(model_, prompt_tokens), tokens, block_tokens_),
      from_block, table, pool, put);
}

size_t context_cache::store_keyed(std::span<const uint64_t> keys, int64_t from_block,
                                  const model::kv_block_table& table,
                                  const model::kv_block_pool& pool, const put_fn& put) const {
  const auto full = static_cast<int64_t>(keys.size());
  if (full <= from_block) return 0;
  const int64_t per = block_tokens_ / layout_.block_size;
  const size_t bytes = layout_.block_bytes();
  std::vector<std::string> names;
  std::vector<std::vector<std::byte>> data;
  for (int64_t b = from_block; b < full; ++b) {
    std::vector<std::byte> block(cache_block_bytes());
    for (int64_t j = 0; j < per; ++j)
      pool.export_block_bytes(table.blocks().at(b * per + j),
                              std::span(block).subspan(j * bytes, bytes));
    names.push_back(context_block_name(keys[b]));
    data.push_back(std::move(block));
  }
  std::vector<pool_put> items;
  for (size_t i = 0; i < names.size(); ++i) items.push_back({names[i], data[i]});
  put(ns_, items);
  return items.size();
}

} // namespace supernode::services::ems
