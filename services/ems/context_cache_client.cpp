#include "services/ems/context_cache_client.hpp"

namespace supernode::services::ems {

context_cache_client::context_cache_client(transport::endpoint& out, const ems_config& config,
                                           const std::string& model_key,
                                           const model::kv_block_layout& layout)
    : client_(std::make_unique<ems_client>(out, config)), pool_(*client_),
      cache_(pool_, config.context_namespace, model_key, config.block_tokens, layout),
      stores_(std::make_unique<serial_executor>()) {}

context_cache_client::context_cache_client(pool_client& pool, const ems_config& config,
                                           const std::string& model_key,
                                           const model::kv_block_layout& layout)
    : pool_(pool), cache_(pool_, config.context_namespace, model_key, config.block_tokens, layout) {
}

context_lookup context_cache_client::load_prefix(std::span<const int32_t> prompt,
                                                 const model::kv_block_table& table,
                                                 model::kv_block_pool& pool) {
  const auto start = std::chrono::steady_clock::now();
  return counted_load(cache_.lookup(prompt), prompt.size(), start, table, pool);
}

context_lookup context_cache_client::load_generated(std::span<const int32_t> tokens,
                                                    int64_t prompt_tokens,
                                                    const model::kv_block_table& table,
                                                    model::kv_block_pool& pool) {
  const auto start = std::chrono::steady_clock::now();
  return counted_load(cache_.lookup_generated(tokens, prompt_tokens), tokens.size(), start, table,
                      pool);
}

context_lookup context_cache_client::counted_load(context_lookup hit, size_t lookup_tokens,
                                                  std::chrono::steady_clock::time_point start,
                                                  const model::kv_block_table& table,
                                                  model::kv_block_pool& pool) {
  if (hit.hit_blocks > 0) cache_.load_into(hit, table, pool);
  const auto took = std::chrono::steady_clock::now() - start;
  {
    // Counted once loaded, all at once.
    std::lock_guard lock(counters_->mutex);
    auto& c = counters_->totals;
    ++c.lookups;
    c.lookup_tokens += lookup_tokens;
    c.read_errors += hit.error.empty() ? 0 : 1;
    if (hit.hit_blocks > 0) {
      c.hit_tokens += static_cast<uint64_t>(hit.hit_tokens(cache_.block_tokens()));
      c.loaded_bytes += static_cast<uint64_t>(hit.hit_blocks) * cache_.cache_block_bytes();
    }
    counters_->load_ns +=
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count());
  }
  hit.kv.clear(); // in the KV pool now
  return hit;
}

context_cache::put_fn context_cache_client::putter() {
  return [this](const std::string& ns, std::span<const pool_put> items) {
    auto count = [c = counters_](size_t stored, size_t failed, const std::string&) {
      std::lock_guard lock(c->mutex);
      c->totals.stored_blocks += stored;
      c->totals.store_failures += failed;
    };
    if (client_) {
      std::vector<std::pair<std::string, std::vector<std::byte>>> blocks;
      for (const auto& item : items)
        blocks.emplace_back(item.key, std::vector<std::byte>(item.data.begin(), item.data.end()));
      stores_->post([this, ns, blocks = std::move(blocks), count] {
        std::vector<pool_put> puts;
        for (const auto& [key, bytes] : blocks) puts.push_back({key, bytes});
        // The answer may come after the role is gone: only the counters stay.
        client_->put_async(ns, puts, count);
      });
      return;
    }
    size_t stored = 0;
    for (const auto& outcome : pool_.put(ns, items)) stored += outcome.stored;
    count(stored, items.size() - stored, {});
  };
}

void context_cache_client::store_async(std::span<const int32_t> tokens, int64_t from_block,
                                       const model::kv_block_table& table,
                                       const model::kv_block_pool& pool) {
  cache_.store(tokens, from_block, table, pool, putter());
}

void context_cache_client::store_generated_async(std::span<const int32_t> tokens,
                                                 int64_t prompt_tokens, int64_t from_block,
                                                 const model::kv_block_table& table,
                                                 const model::kv_block_pool& pool) {
  cache_.store_generated(tokens, prompt_tokens, from_block, table, pool, putter());
}

protocol::cache_stats context_cache_client::stats() const {
  std::lock_guard lock(counters_->mutex);
  auto c = counters_->totals;
  c.load_seconds = static_cast<double>(counters_->load_ns) / 1e9;
  return c;
}

} // namespace supernode::services::ems
