#pragma once
// The test's own cluster instance: an endpoint and its heartbeat clock (without heartbeats the
// other instances rightly declare it down). Handlers are set
// on `ep` before start() by whoever uses the probe.

#include "transport/endpoint.hpp"
#include "transport/heartbeat_clock.hpp"
#include "transport/plane_factory.hpp"

#include <functional>
#include <memory>
#include <string>

namespace supernode::testing {

struct probe_endpoint {
  transport::endpoint ep;
  std::unique_ptr<transport::heartbeat_clock> clock;

  // `attach` sets the endpoint's handlers before it starts.
  probe_endpoint(const transport::cluster_config& cluster, const std::string& name,
                 const std::function<void(transport::endpoint&)>& attach, uint64_t incarnation = 2)
      : ep(cluster, name, transport::make_plane, incarnation) {
    attach(ep);
    ep.start();
    clock = std::make_unique<transport::heartbeat_clock>(ep);
  }
  ~probe_endpoint() {
    clock.reset();
    ep.stop();
  }
};

} // namespace supernode::testing
