// The context cache client's counters, which reach /metrics with every load report: a reading
// taken while lookups run must never show a lookup without the tokens it hit (a reader that
// waits for N lookups and then reads the hits would count too few: serving_ems_scale_test
// failed so in CI, its last prompt's hits missing from the reading that showed its lookup).

#include "../../model/tiny_model.hpp"
#include "model/transformer.hpp"
#include "services/ems/context_cache_client.hpp"
#include "services/ems/context_cache_memory_pool.hpp"

#include <atomic>
#include <gtest/gtest.h>
#include <numeric>
#include <thread>

using namespace supernode;
using namespace supernode::services;

namespace {

constexpr int64_t block_tokens = 16;
constexpr int64_t prompt_tokens = 96;
// Every whole block but the one holding the last token, which prefill computes itself.
constexpr uint64_t hittable_tokens = (prompt_tokens - 1) / block_tokens * block_tokens;

ems::ems_config config() {
  ems::ems_config c;
  c.block_tokens = block_tokens;
  return c;
}

TEST(context_cache_client, a_reading_never_shows_a_lookup_without_its_hit_tokens) {
  const auto layout = model::transformer(supernode::testing::tiny_weights(model::precision::int8))
                          .kv_layout(block_tokens, false);
  ems::context_cache_memory_pool pool;
  ems::context_cache_client cache(pool, config(), "tiny@test", layout);
  std::vector<int32_t> prompt(prompt_tokens);
  std::iota(prompt.begin(), prompt.end(), 7);
  model::kv_block_pool kv(layout, layout.blocks_for(prompt_tokens) * 2);
  model::kv_block_table stored;
  stored.reserve(kv, prompt_tokens);
  cache.store_async(prompt, 0, stored, kv); // over a caller's pool: stored on return
  stored.release(kv);
  ASSERT_EQ(cache.stats().stored_blocks, static_cast<uint64_t>(prompt_tokens / block_tokens));

  constexpr int lookups = 3000;
  std::atomic<bool> done{false};
  std::thread looking([&] {
    for (int i = 0; i < lookups; ++i) {
      model::kv_block_table table;
      table.reserve(kv, prompt_tokens);
      cache.load_prefix(prompt, table, kv);
      table.release(kv);
    }
    done = true;
  });
  uint64_t readings = 0, mid_lookup = 0;
  while (!done) {
    const auto s = cache.stats();
    ++readings;
    mid_lookup += s.hit_tokens != s.lookups * hittable_tokens ? 1 : 0;
  }
  looking.join();
  EXPECT_EQ(mid_lookup, 0u) << "of " << readings << " readings";
  const auto s = cache.stats();
  EXPECT_EQ(s.lookups, static_cast<uint64_t>(lookups));
  EXPECT_EQ(s.hit_tokens, lookups * hittable_tokens);
  EXPECT_EQ(s.loaded_bytes, lookups * (hittable_tokens / block_tokens) * layout.block_bytes());
}

} // namespace
