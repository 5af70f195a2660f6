#include "kernels/thread_pool.hpp"

#include <atomic>
#include <chrono>
#include <gtest/gtest.h>
#include <mutex>
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

TEST(thread_pool, the_caller_runs_its_share_in_order_and_takes_others_from_their_ends) {
  // Three threads, 30 tasks: the caller's share is [0, 10). It runs that share front to back
  // (the GEMM drivers number tasks in weight order, so it streams one run of memory), and
  // what it takes from another share comes off that share's end, in decreasing order.
  thread_pool pool(3);
  const auto caller = std::this_thread::get_id();
  for (int round = 0; round < 50; ++round) {
    std::mutex mutex;
    std::vector<int64_t> callers_tasks;
    std::vector<std::atomic<int>> hits(30);
    pool.parallel_for(30, [&](int64_t i) {
      hits[i].fetch_add(1);
      if (std::this_thread::get_id() != caller) return;
      std::lock_guard lock(mutex);
      callers_tasks.push_back(i);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    int64_t next_own = 0;
    std::vector<int64_t> last_taken(3, 30);
    for (int64_t i : callers_tasks) {
      const int64_t share = i / 10;
      if (share == 0) {
        ASSERT_EQ(i, next_own) << "round " << round;
        ++next_own;
      } else {
        ASSERT_LT(i, last_taken[share]) << "round " << round;
        last_taken[share] = i;
      }
    }
  }
}

TEST(thread_pool, nested_calls_run_inline) {
  thread_pool pool(2);
  std::atomic<int> total{0};
  pool.parallel_for(8,
                    [&](int64_t) { pool.parallel_for(4, [&](int64_t) { total.fetch_add(1); }); });
  EXPECT_EQ(total.load(), 32);
}

// Kernels plan by parallelism(): inside a task of any pool a parallel_for runs inline, so one
// thread is all it has.
TEST(thread_pool, parallelism_is_one_inside_a_task_and_the_size_outside) {
  thread_pool pool(3), other(2);
  EXPECT_EQ(pool.parallelism(), 3);
  std::atomic<int> inside_pool{0}, inside_other{0};
  pool.parallel_for(6, [&](int64_t) {
    inside_pool.fetch_add(pool.parallelism());
    inside_other.fetch_add(other.parallelism());
  });
  EXPECT_EQ(inside_pool.load(), 6);
  EXPECT_EQ(inside_other.load(), 6);
  EXPECT_EQ(pool.parallelism(), 3);
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

// Both sides spin for a while and then sleep: a worker idle between loops, and a caller
// waiting on a worker's long task. Gaps and tasks longer than the spin (tens of microseconds,
// timed by busy loops, not sleeps) take each round through the sleeping hand-offs; every
// round must still run each task once and return only when all have run.
TEST(thread_pool, hands_off_loops_to_sleeping_workers_and_wakes_a_sleeping_caller) {
  thread_pool pool(3);
  auto busy_for = [](std::chrono::microseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {}
  };
  for (int round = 0; round < 100; ++round) {
    busy_for(std::chrono::microseconds(round % 2 ? 300 : 0)); // the workers fall asleep
    std::vector<std::atomic<int>> hits(6);
    pool.parallel_for(6, [&](int64_t i) {
      if (i == 5) busy_for(std::chrono::microseconds(round % 3 ? 300 : 0)); // a worker's share
      hits[i].fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "round " << round;
  }
}
