#pragma once
// The tick a role actor's timer gives its endpoint, for endpoints no actor owns (a process's
// pool session before its roles start, a benchmark's instances, a test's probe): a thread that
// calls endpoint::tick() at once and then every heartbeat interval, so peers keep the instance
// alive (the first tick at once: peers that started earlier hold a silent instance for down) and
// pending requests expire. Stops, and joins, on destruction.

#include "transport/endpoint.hpp"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace supernode::transport {

class heartbeat_clock {
public:
  // `after_tick` (optional) runs on the clock's thread after every tick: what a role actor's tick
  // handler does after endpoint::tick (load reports), for a role hosted without an actor.
  explicit heartbeat_clock(endpoint& ep, std::function<void()> after_tick = {});
  ~heartbeat_clock();
  heartbeat_clock(const heartbeat_clock&) = delete;
  heartbeat_clock& operator=(const heartbeat_clock&) = delete;

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace supernode::transport
