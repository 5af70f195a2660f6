#pragma once
// Builds the plane a config names for one instance: the only place that knows the concrete
// plane classes. Everything else sees transport::plane.

#include "transport/cluster_config.hpp"
#include "transport/plane.hpp"

#include <memory>

namespace supernode::transport {

class inproc_hub;

// The hub shared by every inproc plane of this process.
std::shared_ptr<inproc_hub> process_inproc_hub();

std::unique_ptr<plane> make_plane(const cluster_config& cluster, const plane_config& plane,
                                  const instance_config& self);

} // namespace supernode::transport
