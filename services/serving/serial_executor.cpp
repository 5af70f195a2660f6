#include "services/serving/serial_executor.hpp"

namespace supernode::services {

serial_executor::serial_executor() {
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return; // stopping, and nothing left to run
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  });
}

serial_executor::~serial_executor() {
  stop();
}

void serial_executor::post(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void serial_executor::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && !on_executor_thread()) thread_.join();
}

} // namespace supernode::services
