#include "kernels/thread_pool.hpp"

#include <atomic>
#include <gtest/gtest.h>
#include <vector>

using supernode::kernels::thread_pool;

TEST(thread_pool, runs_every_task_once) {
  thread_pool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t i) { hits[i].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(thread_pool, nested_calls_run_inline) {
  thread_pool pool(2);
  std::atomic<int> total{0};
  pool.parallel_for(8,
                    [&](int64_t) { pool.parallel_for(4, [&](int64_t) { total.fetch_add(1); }); });
  EXPECT_EQ(total.load(), 32);
}

TEST(thread_pool, single_thread_pool_runs_inline) {
  thread_pool pool(1);
  int64_t sum = 0;
  pool.parallel_for(100, [&](int64_t i) { sum += i; });
  EXPECT_EQ(sum, 4950);
}
