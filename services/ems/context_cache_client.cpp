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
  ++counters_->lookups;
  counters_->lookup_tokens += lookup_tokens;
  if (!hit.error.empty()) ++counters_->read_errors;
  if (hit.hit_blocks > 0) {
    cache_.load_into(hit, table, pool);
    counters_->hit_tokens += hit.hit_tokens(cache_.block_tokens());
    counters_->loaded_bytes += static_cast<uint64_t>(hit.hit_blocks) * cache_.cache_block_bytes();
  }
  counters_->load_ns += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count());
  hit.kv.clear(); // in the KV pool now
  return hit;
}

context_cache::put_fn context_cache_client::putter() {
  return [this](const std::string& ns, std::span<const pool_put> items) {
    auto count = [c = counters_](size_t stored, size_t failed, const std::string&) {
      c->stored_blocks += stored;
      c->store_failures += failed;
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
  protocol::cache_stats c;
  c.lookups = counters_->lookups.load();
  c.lookup_tokens = counters_->lookup_tokens.load();
  c.hit_tokens = counters_->hit_tokens.load();
  c.stored_blocks = counters_->stored_blocks.load();
  c.store_failures = counters_->store_failures.load();
  c.read_errors = counters_->read_errors.load();
  c.load_seconds = static_cast<double>(counters_->load_ns.load()) / 1e9;
  c.loaded_bytes = counters_->loaded_bytes.load();
  return c;
}

} // namespace supernode::services::ems
