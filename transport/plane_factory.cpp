#include "transport/plane_factory.hpp"

#include <stdexcept>

#include "transport/inproc_plane.hpp"

namespace supernode::transport {

std::shared_ptr<inproc_hub> process_inproc_hub() {
  static auto hub = inproc_hub::create();
  return hub;
}

std::unique_ptr<plane> make_plane(const cluster_config& cluster, const plane_config& pc,
                                  const instance_config& self) {
  (void)cluster;
  if (pc.kind == "inproc")
    return std::make_unique<inproc_plane>(process_inproc_hub(), self.name, pc.queue_limit);
  throw std::runtime_error("plane '" + pc.name + "' of kind '" + pc.kind +
                           "' is not available in this build");
}

} // namespace supernode::transport
