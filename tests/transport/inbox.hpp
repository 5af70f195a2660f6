#pragma once
// Collects what an endpoint's handlers deliver, so tests wait on conditions with a timeout
// instead of sleeping.

#include "transport/endpoint.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace supernode::testing {

struct inbox {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::pair<transport::peer_id, transport::envelope>> messages;
  std::vector<transport::membership_event> events;

  template<class Pred>
  bool wait_for(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(m);
    return cv.wait_for(lock, timeout, [&] { return pred(); });
  }
  template<class T>
  size_t count() {
    size_t n = 0;
    for (auto& [from, msg] : messages) n += msg.template is<T>();
    return n;
  }
  void attach(transport::endpoint& e) {
    e.set_message_handler([this](const transport::peer_id& from, transport::envelope msg) {
      std::lock_guard lock(m);
      messages.emplace_back(from, std::move(msg));
      cv.notify_all();
    });
    e.set_event_handler([this](const transport::membership_event& ev) {
      std::lock_guard lock(m);
      events.push_back(ev);
      cv.notify_all();
    });
  }
};

} // namespace supernode::testing
