#include "kernels/thread_pool.hpp"

#include <cstdlib>
#include <memory>

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

thread_pool::thread_pool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::run_tasks() {
  inside_task = true;
  for (int64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < n_;) (*fn_)(i);
  inside_task = false;
}

void thread_pool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_tasks();
    {
      std::lock_guard lock(mutex_);
      if (--active_ == 0) done_.notify_one();
    }
  }
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  std::unique_lock submit(submit_mutex_, std::defer_lock);
  if (workers_.empty() || n == 1 || inside_task || !submit.try_lock()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    n_ = n;
    next_.store(0, std::memory_order_relaxed);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_tasks();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return active_ == 0; });
  fn_ = nullptr;
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
