#include "kernels/thread_pool.hpp"

#include <atomic>
#include <gtest/gtest.h>
#include <stdexcept>
#include <thread>
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

TEST(thread_pool, a_task_thrown_on_a_worker_reaches_the_caller_and_the_pool_runs_on) {
  thread_pool pool(2);
  const auto caller = std::this_thread::get_id();
  // Two tasks, each waiting until both have started: one of them runs on the worker.
  std::atomic<int> started{0};
  EXPECT_THROW(
      {
        try {
          pool.parallel_for(2, [&](int64_t) {
            started.fetch_add(1);
            while (started.load() < 2) {}
            if (std::this_thread::get_id() != caller) throw std::runtime_error("from the worker");
          });
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "from the worker");
          throw;
        }
      },
      std::runtime_error);
  // The failed loop left nothing behind: the next one runs every task once.
  std::vector<std::atomic<int>> hits(100);
  pool.parallel_for(100, [&](int64_t i) { hits[i].fetch_add(1); });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}
