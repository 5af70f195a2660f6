#pragma once
// What a serving role needs to use the context cache: an MP SDK client on the role's endpoint,
// the context cache over it, counters for /metrics, and asynchronous stores whose answers may
// arrive after the role is gone (they touch only the shared counters). Prefill instances look
// up and store prompts; decode instances store the KV their decode arithmetic made when
// [ems] store_decode_kv says so (under keys no prompt prefix has), and load it back when a
// request resumes after its decode instance died.

#include "model/kv_cache.hpp"
#include "services/ems/context_cache.hpp"
#include "services/ems/ems_client.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/serving/serial_executor.hpp"

#include <chrono>
#include <memory>
#include <mutex>

namespace supernode::services::protocol {
struct ems_ring_view;
}

namespace supernode::services::ems {

class context_cache_client {
public:
  // `model_key` as serving_config::cache_model_key() makes it.
  context_cache_client(transport::endpoint& out, const ems_config& config,
                       const std::string& model_key, const model::kv_block_layout& layout);
  // Over a pool the caller owns (tests, benchmarks): stores wait for it.
  context_cache_client(pool_client& pool, const ems_config& config, const std::string& model_key,
                       const model::kv_block_layout& layout);

  void on_ring_view(const protocol::ems_ring_view& view) {
    if (client_) client_->on_ring_view(view);
  }
  int64_t block_tokens() const { return cache_.block_tokens(); }

  // The longest cached prefix of `prompt`, loaded into the first blocks of `table`; returns the
  // lookup (its kv already moved into the pool) and counts it.
  context_lookup load_prefix(std::span<const int32_t> prompt, const model::kv_block_table& table,
                             model::kv_block_pool& pool);
  // The longest run of decode-made blocks of `tokens` (prompt, then generated tokens with KV)
  // the pool has, loaded into their blocks of `table`; counted like load_prefix.
  context_lookup load_generated(std::span<const int32_t> tokens, int64_t prompt_tokens,
                                const model::kv_block_table& table, model::kv_block_pool& pool);
  // Exports the full blocks of `tokens` from `from_block` on and puts them without waiting: the
  // caller's thread only copies the blocks out; sending them (which may first ask the
  // controller for its ring) is the client's store thread's.
  void store_async(std::span<const int32_t> tokens, int64_t from_block,
                   const model::kv_block_table& table, const model::kv_block_pool& pool);
  // The same for decode-made KV after a prompt of `prompt_tokens` (context_cache::store_generated).
  void store_generated_async(std::span<const int32_t> tokens, int64_t prompt_tokens,
                             int64_t from_block, const model::kv_block_table& table,
                             const model::kv_block_pool& pool);
  protocol::cache_stats stats() const;

private:
  // Under one lock, so that a reading never shows a lookup without its hit tokens (a test or
  // a dashboard that waits for N lookups then reads the hits would see too few) or a put
  // without its outcome.
  struct counters {
    std::mutex mutex;
    protocol::cache_stats totals; // lookups, hits and stores; load_seconds is load_ns's
    uint64_t load_ns = 0;
  };
  // Loads a lookup's blocks into `table` and counts it.
  context_lookup counted_load(context_lookup hit, size_t lookup_tokens,
                              std::chrono::steady_clock::time_point start,
                              const model::kv_block_table& table, model::kv_block_pool& pool);
  // What context_cache's stores hand their blocks to.
  context_cache::put_fn putter();

  std::unique_ptr<ems_client> client_; // null over a caller's pool
  pool_client& pool_;
  context_cache cache_;
  std::shared_ptr<counters> counters_ = std::make_shared<counters>();
  // Sends the puts of client_ (stopped, after sending what is queued, before client_ goes).
  std::unique_ptr<serial_executor> stores_;
};

} // namespace supernode::services::ems
