#pragma once
// One thread that runs posted tasks in order: state that only its tasks touch needs no lock.
// post() never blocks (beyond a short queue lock), so actor threads may post.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace supernode::services {

class serial_executor {
public:
  serial_executor();
  ~serial_executor();
  serial_executor(const serial_executor&) = delete;
  serial_executor& operator=(const serial_executor&) = delete;

  // Runs `task` on the executor's thread after everything posted before it. Dropped after stop().
  void post(std::function<void()> task);
  // Runs what is queued, then joins the thread. Idempotent.
  void stop();
  bool on_executor_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

private:
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace supernode::services
