#pragma once
// A small compute pool shared by the process. Kernels split work into tasks whose results
// never depend on which thread runs them, so every kernel stays batch-invariant whatever the
// pool size.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace supernode::kernels {

class thread_pool {
public:
  // `threads` counts the calling thread too: a pool of 1 runs everything inline.
  explicit thread_pool(int threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // The threads a parallel_for called here and now would spread over: 1 inside a task of any
  // pool (the call runs inline), else size(). Kernels plan their tasks by this, so a GEMM run
  // inside a task is not cut into pieces only one thread will take.
  int parallelism() const;

  // Runs fn(i) for every i in [0, n) and returns when all have finished. The caller takes part.
  // Each thread runs a contiguous share of [0, n) in order, then takes what is left of the
  // others' shares from their far ends: the GEMM drivers number tasks in weight order, so each
  // thread streams one run of memory instead of jumping to wherever a shared counter is.
  // Called from inside a task, or while another thread owns the pool, it runs inline: nesting
  // and concurrent callers never deadlock. An exception a task throws, on whichever thread, is
  // rethrown here once every task has ended (the first one thrown; tasks not yet started are
  // skipped), as if the loop had run inline.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

  // The share of [0, n) parallel_for gives participant `i` of `participants` (the caller is 0):
  // [first, end), contiguous, in participant order. Callers that order their tasks for the pool
  // (largest first in each share) cut by this.
  struct share_bounds {
    int64_t first, end;
  };
  static share_bounds share_of(int64_t n, int64_t i, int64_t participants) {
    return {n * i / participants, n * (i + 1) / participants};
  }

  // The process-wide pool: SUPERNODE_THREADS if set, else the hardware concurrency.
  static thread_pool& shared();
  // Resizes the shared pool; call before the first kernel runs (the CLI's --threads).
  static void configure_shared(int threads);

private:
  void worker_loop(int self);
  void run_tasks(int self, const std::function<void(int64_t)>& fn);
  bool claim(int self, int64_t& task);

  // A parallel_for's hand-off moves cache lines between the cores, and on the guests this runs
  // on one crossing takes about 330 ns (the two vCPUs sit far apart; a decode step makes about
  // 280 calls). So everything the caller writes for a worker sits in one line (its mailbox),
  // what the worker writes back in another of its own, the caller's flags stay untouched
  // unless they change, and no mutex changes hands unless a thread really sleeps.
  struct worker_lines {
    struct alignas(64) {
      std::atomic<uint64_t> generation{0}; // bumped by the caller: a new loop for this worker
      const std::function<void(int64_t)>* fn = nullptr; // published by the generation's release
    } mailbox;
    struct alignas(64) {
      std::atomic<uint64_t> generation{0}; // the last loop this worker is done with
    } finished;
  };
  // Participant i's share as (front, end): front in the low 32 bits, end in the high 32. The
  // owner takes the front, the others the task just before the end, each by compare-exchange.
  struct alignas(64) share {
    std::atomic<uint64_t> bounds{0};
  };

  std::vector<std::thread> workers_;
  std::vector<worker_lines> lines_; // [worker - 1]
  std::vector<share> shares_;       // [participant]
  uint64_t generation_ = 0;         // the caller's count of loops handed out
  std::mutex submit_mutex_;         // one parallel_for at a time owns the workers
  // Sleeping, on either side, goes through mutex_: a sleeper announces itself (sleepers_,
  // caller_sleeping_) before it checks its condition a last time, and the other side takes the
  // mutex before notifying only when it sees the announcement (both sides sequentially
  // consistent, so at least one of them sees the other's write).
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<bool> failed_{false}; // written only when a task throws
  std::mutex error_mutex_;
  std::exception_ptr error_; // the first exception of the running parallel_for
};

// Runs fn(begin, end) over [0, n) cut into ranges of `per_task` items, on the shared pool: for
// loops whose items are independent (rows, routes), too many for one thread and too small for a
// task each.
template<class Fn>
void parallel_for_ranges(int64_t n, int64_t per_task, Fn fn) {
  thread_pool::shared().parallel_for((n + per_task - 1) / per_task, [&](int64_t t) {
    const int64_t begin = t * per_task, end = begin + per_task < n ? begin + per_task : n;
    fn(begin, end);
  });
}

} // namespace supernode::kernels
