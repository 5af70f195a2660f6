#include "kernels/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace supernode::kernels {

namespace {
thread_local bool inside_task = false;

std::unique_ptr<thread_pool>& shared_slot() {
  static std::unique_ptr<thread_pool> pool;
  return pool;
}

int default_threads() {
  if (const char* env = std::getenv("SUPERNODE_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

std::mutex shared_mutex;
} // namespace

thread_pool::thread_pool(int threads)
    : lines_(static_cast<size_t>(std::max(threads, 1) - 1)),
      shares_(static_cast<size_t>(std::max(threads, 1))) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {
constexpr uint64_t pack(uint64_t front, uint64_t end) {
  return front | end << 32;
}

// Takes one task off a share, from its front (the owner) or from its end (any other thread).
bool take(std::atomic<uint64_t>& bounds, bool from_front, int64_t& task) {
  for (uint64_t b = bounds.load(std::memory_order_relaxed);;) {
    const uint64_t front = b & 0xffffffffu, end = b >> 32;
    if (front >= end) return false;
    const uint64_t taken = from_front ? front : end - 1;
    if (bounds.compare_exchange_weak(b, from_front ? pack(front + 1, end) : pack(front, end - 1),
                                     std::memory_order_relaxed)) {
      task = static_cast<int64_t>(taken);
      return true;
    }
  }
}
} // namespace

bool thread_pool::claim(int self, int64_t& task) {
  const int count = static_cast<int>(shares_.size());
  for (int step = 0; step < count; ++step)
    if (take(shares_[(self + step) % count].bounds, step == 0, task)) return true;
  return false;
}

void thread_pool::run_tasks(int self, const std::function<void(int64_t)>& fn) {
  inside_task = true;
  for (int64_t i; claim(self, i);) {
    if (failed_.load(std::memory_order_relaxed)) continue; // the loop is lost: skip the rest
    try {
      fn(i);
    } catch (...) {
      // Escaping a worker's thread would terminate the process: the caller rethrows it.
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  inside_task = false;
}

namespace {
// Kernels call parallel_for back to back (a decode step makes about a hundred calls), and a
// futex sleep/wake round costs tens of microseconds on a VM: both sides spin briefly first.
template<class Pred>
bool spin_until(Pred ready) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > limit) return false;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}
} // namespace

void thread_pool::worker_loop(int self) {
  auto& box = lines_[static_cast<size_t>(self - 1)].mailbox;
  auto& done = lines_[static_cast<size_t>(self - 1)].finished;
  uint64_t seen = 0;
  for (;;) {
    auto has_work = [&](std::memory_order order) {
      return stop_.load(order) || box.generation.load(order) != seen;
    };
    if (!spin_until([&] { return has_work(std::memory_order_acquire); })) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return has_work(std::memory_order_seq_cst); });
      }
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = box.generation.load(std::memory_order_acquire);
    run_tasks(self, *box.fn);
    done.generation.store(seen, std::memory_order_seq_cst);
    if (caller_sleeping_.load(std::memory_order_seq_cst)) {
      { std::lock_guard lock(mutex_); }
      done_.notify_one(); // only the one caller that owns the pool waits on done_
    }
  }
}

int thread_pool::parallelism() const {
  return inside_task ? 1 : size();
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  std::unique_lock submit(submit_mutex_, std::defer_lock);
  if (workers_.empty() || n == 1 || inside_task || !submit.try_lock()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  if (n > int64_t{0xffffffff}) throw std::length_error("thread_pool::parallel_for: too many tasks");
  const int64_t count = static_cast<int64_t>(shares_.size());
  for (int64_t i = 0; i < count; ++i) {
    const share_bounds share = share_of(n, i, count);
    shares_[i].bounds.store(
        pack(static_cast<uint64_t>(share.first), static_cast<uint64_t>(share.end)),
        std::memory_order_relaxed);
  }
  // The shares and fn reach each worker with its mailbox's generation (a release).
  const uint64_t generation = ++generation_;
  for (auto& l : lines_) {
    l.mailbox.fn = &fn;
    l.mailbox.generation.store(generation, std::memory_order_seq_cst);
  }
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    // A worker that found no work holds mutex_ from its last check until it sleeps.
    { std::lock_guard lock(mutex_); }
    wake_.notify_all();
  }
  run_tasks(0, fn);
  auto all_done = [&](std::memory_order order) {
    for (auto& l : lines_)
      if (l.finished.generation.load(order) != generation) return false;
    return true;
  };
  if (!spin_until([&] { return all_done(std::memory_order_acquire); })) {
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [&] { return all_done(std::memory_order_seq_cst); });
    }
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
  if (failed_.load(std::memory_order_relaxed)) {
    failed_.store(false, std::memory_order_relaxed);
    std::exception_ptr error;
    {
      std::lock_guard lock(error_mutex_);
      error.swap(error_);
    }
    std::rethrow_exception(error);
  }
}

thread_pool& thread_pool::shared() {
  std::lock_guard lock(shared_mutex);
  auto& slot = shared_slot();
  if (!slot) slot = std::make_unique<thread_pool>(default_threads());
  return *slot;
}

void thread_pool::configure_shared(int threads) {
  std::lock_guard lock(shared_mutex);
  shared_slot() = std::make_unique<thread_pool>(threads > 0 ? threads : default_threads());
}

} // namespace supernode::kernels
