#pragma once
// A process's seat in the cluster for talking to the pool outside any role actor: an endpoint
// under one instance's name, its heartbeats, and an MP SDK client that receives the controller's
// ring pushes. What a process uses before its roles start (the model cache) and what tools use
// (benchmarks); a role uses ems_client on its own endpoint instead.

#include "services/ems/ems_client.hpp"
#include "transport/endpoint.hpp"
#include "transport/heartbeat_clock.hpp"

#include <memory>
#include <mutex>

namespace supernode::services::ems {

class pool_session {
public:
  // Starts the endpoint and its heartbeats. Throws what the planes throw.
  pool_session(const transport::cluster_config& cluster, const std::string& instance,
               uint64_t incarnation, const ems_config& config);
  // Stops heartbeats and the endpoint, without announcing a departure (the instance goes on
  // in the roles that start next).
  ~pool_session();
  pool_session(const pool_session&) = delete;
  pool_session& operator=(const pool_session&) = delete;

  ems_client& client() { return *client_; }
  transport::endpoint& endpoint() { return endpoint_; }

private:
  transport::endpoint endpoint_;
  std::mutex mutex_; // client_ against the ring pushes arriving on plane threads
  std::unique_ptr<ems_client> client_;
  std::unique_ptr<transport::heartbeat_clock> clock_;
};

} // namespace supernode::services::ems
