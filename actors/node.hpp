#pragma once
// One process of a cluster: a CAF actor system hosting the role instances the config assigns
// to process `process` #index. Blocks until SIGINT or SIGTERM, then shuts the actors down
// (each announces its departure and releases its planes' sockets and segments).

#include "services/serving/serving_config.hpp"
#include "transport/cluster_config.hpp"
#include "transport/endpoint.hpp"

#include <string>

namespace supernode::actors {

// Applies the process's placement (compute threads, CPU pinning), starts every instance and
// prints, on stdout, "listening <instance> <address>" for each instance clients reach, then
// "ready <instance> ..." once all are up, so a parent process can wait for it. Returns the exit
// code: 1 when an instance cannot start (the reason on stderr), fenced_exit_code when peers
// fenced this process after a hang.
inline constexpr int fenced_exit_code = 75; // EX_TEMPFAIL: restart me
// A process that joined at run time (its instance is in `cluster` as joined) announces itself
// through `join_seeds`.
int run_node(const transport::cluster_config& cluster, const services::serving_config& serving,
             const std::string& process, int index,
             std::vector<transport::endpoint::join_seed> join_seeds = {});

} // namespace supernode::actors
