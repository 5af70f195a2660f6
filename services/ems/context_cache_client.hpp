#pragma once
// What a serving role needs to use the context cache: an MP SDK client on the role's endpoint,
// the context cache over it, counters for /metrics, and asynchronous stores whose answers may
// arrive after the role is gone (they touch only the shared counters). Prefill instances look
// up and store prompts; decode instances store what they generated when [ems] store_decode_kv
// says so (a follow-up turn whose prompt repeats the conversation then hits it).

#include "model/kv_cache.hpp"
#include "services/ems/context_cache.hpp"
#include "services/ems/ems_client.hpp"
#include "services/protocol/serving_messages.hpp"

#include <atomic>
#include <memory>

namespace supernode::services::protocol {
struct ems_ring_view;
}

namespace supernode::services::ems {

class context_cache_client {
public:
  // `model_key` as serving_config::cache_model_key() makes it.
  context_cache_client(transport::endpoint& out, const ems_config& config,
                       const std::string& model_key, const model::kv_block_layout& layout);

  void on_ring_view(const protocol::ems_ring_view& view) { client_.on_ring_view(view); }
  int64_t block_tokens() const { return cache_.block_tokens(); }

  // The longest cached prefix of `prompt`, loaded into the first blocks of `table`; returns the
  // lookup (its kv already moved into the pool) and counts it.
  context_lookup load_prefix(std::span<const int32_t> prompt, const model::kv_block_table& table,
                             model::kv_block_pool& pool);
  // Exports the full blocks of `tokens` from `from_block` on and puts them without waiting.
  void store_async(std::span<const int32_t> tokens, int64_t from_block,
                   const model::kv_block_table& table, const model::kv_block_pool& pool);
  protocol::cache_stats stats() const;

private:
  struct counters {
    std::atomic<uint64_t> lookups{0}, lookup_tokens{0}, hit_tokens{0}, stored_blocks{0},
        store_failures{0}, read_errors{0}, load_ns{0}, loaded_bytes{0};
  };
  ems_client client_;
  context_cache cache_;
  std::shared_ptr<counters> counters_ = std::make_shared<counters>();
};

} // namespace supernode::services::ems
