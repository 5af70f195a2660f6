#pragma once
// An expert-parallel group whose ranks are threads of this process, each with its own rank
// fabric (shared memory or ZeroMQ ipc) and expert_parallel, as tests and `bench moe` run it.
// Serving processes seat their ranks with ep_rank instead.

#include "services/moe/expert_parallel.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace supernode::services {

struct local_group_options {
  std::string fabric = "shm"; // shm | zmq (ipc sockets under the temp folder); else throws
  std::string cluster = "local";
  int ranks = 1;
  ep_options ep; // rank and ranks are filled in per thread
};

using local_rank_body = std::function<void(int rank, expert_parallel&, transport::rank_fabric&)>;

// Runs body on every rank's thread once all ranks are connected; a rank stays in the group until
// every body has returned (a rank that left early would break its peers' ops). Returns each
// rank's error, empty when its body (and set-up) succeeded. An unknown fabric throws
// std::invalid_argument before any rank starts.
std::vector<std::string> run_local_group(const local_group_options& options,
                                         std::shared_ptr<const model::model_weights> weights,
                                         const local_rank_body& body);

// For a rank whose own forwards are over: joins its peers' forwards until `done` ranks say they
// are through (each increments `done` before calling this).
void serve_peers_until(expert_parallel& ep, const std::atomic<int>& done, int ranks);

} // namespace supernode::services
