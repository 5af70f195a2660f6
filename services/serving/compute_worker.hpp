#pragma once
// The compute thread of a prefill or decode instance: sleeps until there is work (or a stop),
// runs one round of it, and repeats. The owner's message handlers share state with the
// thread under mutex() and call notify() after adding work.

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace supernode::services {

class compute_worker {
public:
  ~compute_worker() { stop(); }

  // `has_work` runs with mutex() held; `round` and `at_exit` without it, on the thread.
  void start(std::function<bool()> has_work, std::function<void()> round,
             std::function<void()> at_exit = {}) {
    thread_ = std::thread([this, has_work = std::move(has_work), round = std::move(round),
                           at_exit = std::move(at_exit)] {
      for (;;) {
        {
          std::unique_lock lock(mutex_);
          wake_.wait(lock, [&] { return stopping_ || has_work(); });
          if (stopping_) break;
        }
        round();
      }
      if (at_exit) at_exit();
    });
  }
  // Finishes the round in progress, runs at_exit and joins. Idempotent.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void notify() { wake_.notify_all(); }
  std::mutex& mutex() { return mutex_; }

private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace supernode::services
