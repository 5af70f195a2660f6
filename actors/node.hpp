#pragma once
// One process of a cluster: a CAF actor system hosting the role instances the config assigns
// to process `process` #index, or one instance it joins a live cluster with. Blocks until
// SIGINT or SIGTERM, then shuts the actors down (each announces its departure and releases its
// planes' sockets and segments). A prefill or decode process switches the role it serves on a
// role-switch signal (services/serving/role_switch.hpp) without restarting.

#include "services/serving/serving_config.hpp"
#include "transport/cluster_config.hpp"
#include "transport/endpoint.hpp"

#include <optional>
#include <string>

namespace supernode::actors {

// A process that joins a live cluster instead of serving its config instances: it claims a
// name of `role` (transport/instance_claim.hpp) and announces itself through `seeds`.
struct node_join {
  std::string role;
  std::vector<transport::endpoint::join_seed> seeds;
};

// Applies the process's placement (compute threads, CPU pinning), starts every instance and
// prints, on stdout, "listening <instance> <address>" for each instance clients reach, then
// "ready <instance> ..." once all are up, so a parent process can wait for it (and again after
// each role switch). Returns the exit code: 1 when an instance cannot start (the reason on
// stderr), fenced_exit_code when peers fenced this process after a hang.
inline constexpr int fenced_exit_code = 75; // EX_TEMPFAIL: restart me
int run_node(const transport::cluster_config& cluster, const services::serving_config& serving,
             const std::string& process, int index, std::optional<node_join> join = {});

// "scheduler-0,gateway-0@tcp://10.0.0.2:7000": members to join through. A bare name is a config
// instance (its address comes from the config); NAME@ADDRESS names a member's control address.
// Throws std::runtime_error naming a bare name the config lacks, or an empty list.
std::vector<transport::endpoint::join_seed> parse_join_seeds(const std::string& text,
                                                             const transport::cluster_config& c);

} // namespace supernode::actors
