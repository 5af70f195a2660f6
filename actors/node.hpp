#pragma once
// One process of a cluster: a CAF actor system hosting the role instances the config assigns
// to process `process` #index. Blocks until SIGINT or SIGTERM, then shuts the actors down
// (each announces its departure and releases its planes' sockets and segments).

#include "transport/cluster_config.hpp"

#include <string>

namespace supernode::actors {

// Prints "ready <instance> ..." on stdout once every instance is up, so a parent process can
// wait for it. Returns the exit code.
int run_node(const transport::cluster_config& cluster, const std::string& process, int index);

} // namespace supernode::actors
