#pragma once
// Builds the plane a config names for one instance: the only place that knows the concrete
// plane classes. Everything else sees transport::plane.

#include "transport/cluster_config.hpp"
#include "transport/plane.hpp"

#include <memory>

namespace supernode::transport {

class inproc_hub;
class cluster_keys;

// The hub shared by every inproc plane of this process.
std::shared_ptr<inproc_hub> process_inproc_hub();

// The cluster's CurveZMQ keys (cluster.keys_dir()), for every zmq plane and zmq rank fabric of
// this process: one object per folder, so its owner lookups are shared. When the cluster makes
// its keys on start (no key_dir configured), the missing pairs of all its instances are made
// first. Throws when the folder is not private or cannot be made.
std::shared_ptr<const cluster_keys> cluster_keys_for(const cluster_config& cluster);

// zmq planes always run CurveZMQ with cluster_keys_for(cluster).
std::unique_ptr<plane> make_plane(const cluster_config& cluster, const plane_config& plane,
                                  const instance_config& self);

} // namespace supernode::transport
