#include "model/kv_cache.hpp"

#include <gtest/gtest.h>
#include <numeric>

using namespace supernode::model;

TEST(kv_cache, tables_grow_by_blocks_and_release_them) {
  kv_block_layout layout{2, 4, 3, 2};
  EXPECT_EQ(layout.block_floats(), 2 * 4 * 5);
  kv_block_pool pool(layout, 5);
  kv_block_table t;
  t.reserve(pool, 9); // three blocks of four
  EXPECT_EQ(t.blocks().size(), 3u);
  EXPECT_EQ(pool.free_blocks(), 2);
  t.reserve(pool, 12); // still three
  EXPECT_EQ(pool.free_blocks(), 2);
  // Not enough room: nothing is taken.
  kv_block_table u;
  EXPECT_THROW(u.reserve(pool, 13), kv_cache_full);
  EXPECT_EQ(pool.free_blocks(), 2);
  t.release(pool);
  EXPECT_EQ(pool.free_blocks(), 5);
  EXPECT_THROW(pool.release(0), std::logic_error); // double free is caught
}

TEST(kv_cache, token_slots_and_views_address_the_same_memory) {
  kv_block_layout layout{2, 4, 3, 2};
  kv_block_pool pool(layout, 6);
  kv_block_table t;
  t.reserve(pool, 10);
  for (int64_t layer = 0; layer < 2; ++layer)
    for (int64_t pos = 0; pos < 10; ++pos) {
      float* s = t.token_slot(pool, layer, pos);
      for (int64_t i = 0; i < 5; ++i) s[i] = static_cast<float>(layer * 1000 + pos * 10 + i);
    }
  std::vector<const float*> ptrs;
  auto v = t.view(pool, 1, 10, ptrs);
  for (int64_t pos = 0; pos < 10; ++pos) EXPECT_EQ(v.token(pos)[4], 1000 + pos * 10 + 4);
}

TEST(kv_cache, blocks_export_and_import_across_pools) {
  kv_block_layout layout{3, 2, 4, 2};
  kv_block_pool a(layout, 4), b(layout, 4);
  auto src = *a.allocate();
  for (int64_t l = 0; l < 3; ++l)
    std::iota(a.block_data(l, src), a.block_data(l, src) + layout.layer_block_floats(),
              static_cast<float>(l * 100));
  std::vector<float> wire(layout.block_floats());
  a.export_block(src, wire);
  auto dst = *b.allocate();
  b.import_block(dst, wire);
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t i = 0; i < layout.layer_block_floats(); ++i)
      EXPECT_EQ(b.block_data(l, dst)[i], a.block_data(l, src)[i]);
  std::vector<float> wrong(layout.block_floats() - 1);
  EXPECT_THROW(b.import_block(dst, wrong), std::invalid_argument);
}
