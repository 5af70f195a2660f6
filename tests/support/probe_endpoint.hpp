#pragma once
// The test's own cluster instance: an endpoint and its heartbeat clock (what a role actor's tick
// timer does; without heartbeats the other instances rightly declare it down). Handlers are set
// on `ep` before start() by whoever uses the probe.

#include "transport/endpoint.hpp"
#include "transport/plane_factory.hpp"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace supernode::testing {

struct probe_endpoint {
  transport::endpoint ep;
  std::mutex clock_mutex;
  std::condition_variable clock_cv;
  bool stopping = false;
  std::thread clock;

  // `attach` sets the endpoint's handlers before it starts.
  probe_endpoint(const transport::cluster_config& cluster, const std::string& name,
                 const std::function<void(transport::endpoint&)>& attach, uint64_t incarnation = 2)
      : ep(cluster, name, transport::make_plane, incarnation) {
    attach(ep);
    ep.start();
    clock = std::thread([this, interval = cluster.heartbeat_interval] {
      std::unique_lock lock(clock_mutex);
      while (!clock_cv.wait_for(lock, interval, [&] { return stopping; }))
        ep.tick(std::chrono::steady_clock::now());
    });
  }
  ~probe_endpoint() {
    {
      std::lock_guard lock(clock_mutex);
      stopping = true;
    }
    clock_cv.notify_all();
    clock.join();
    ep.stop();
  }
};

} // namespace supernode::testing
