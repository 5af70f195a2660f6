#include "transport/heartbeat_clock.hpp"

namespace supernode::transport {

heartbeat_clock::heartbeat_clock(endpoint& ep, std::function<void()> after_tick) {
  ep.tick(std::chrono::steady_clock::now());
  if (after_tick) after_tick();
  thread_ = std::thread(
      [this, &ep, interval = ep.cluster().heartbeat_interval, after_tick = std::move(after_tick)] {
        std::unique_lock lock(mutex_);
        while (!cv_.wait_for(lock, interval, [&] { return stopping_; })) {
          lock.unlock();
          ep.tick(std::chrono::steady_clock::now());
          if (after_tick) after_tick();
          lock.lock();
        }
      });
}

heartbeat_clock::~heartbeat_clock() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

} // namespace supernode::transport
