#pragma once
// Collects what a plane delivers, so tests wait on conditions with a timeout instead of sleeping.

#include "transport/plane.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

namespace supernode::testing {

struct collector {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::pair<transport::peer_id, transport::envelope>> messages;

  transport::message_handler handler() {
    return [this](const transport::peer_id& from, transport::envelope msg) {
      std::lock_guard lock(m);
      messages.emplace_back(from, std::move(msg));
      cv.notify_all();
    };
  }
  template<class T>
  size_t count_locked() const {
    size_t n = 0;
    for (auto& [from, msg] : messages) n += msg.template is<T>();
    return n;
  }
  // Waits for the n-th message of type T (1-based) and returns it, or nullptr on timeout.
  template<class T>
  const T* wait_nth(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, timeout, [&] { return count_locked<T>() >= n; })) return nullptr;
    size_t seen = 0;
    for (auto& [from, msg] : messages)
      if (msg.template is<T>() && ++seen == n) return msg.template get<T>();
    return nullptr;
  }
};

} // namespace supernode::testing
