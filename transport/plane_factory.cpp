#include "transport/plane_factory.hpp"

#include "transport/cluster_keys.hpp"
#include "transport/inproc_plane.hpp"
#include "transport/shm_plane.hpp"
#include "transport/zmq_plane.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>

namespace supernode::transport {

namespace {

// The keys shm rings are signed with. Unconfigured (<run_dir>/keys), every instance's pair is
// made on start by whichever process comes first; a configured key_dir is made beforehand.
std::shared_ptr<const cluster_keys> shm_keys_of(const cluster_config& cluster) {
  auto keys = std::make_shared<const cluster_keys>(cluster.keys_dir());
  if (cluster.keys_made_on_start()) {
    std::vector<std::string> names;
    for (auto& inst : cluster.instances()) names.push_back(inst.name);
    keys->ensure(names);
  }
  return keys;
}

} // namespace

std::shared_ptr<inproc_hub> process_inproc_hub() {
  static auto hub = inproc_hub::create();
  return hub;
}

std::shared_ptr<const cluster_keys> cluster_keys_for(const cluster_config& cluster) {
  static std::mutex mutex;
  static std::map<std::filesystem::path, std::shared_ptr<const cluster_keys>> made;
  const auto dir = cluster.keys_dir();
  std::lock_guard lock(mutex);
  auto& keys = made[dir];
  if (!keys) keys = std::make_shared<const cluster_keys>(dir);
  // Every time: instances a later config adds get their pairs too (a few stat calls).
  if (cluster.keys_made_on_start()) {
    std::vector<std::string> names;
    for (const auto& inst : cluster.instances()) names.push_back(inst.name);
    keys->ensure(names);
  }
  return keys;
}

std::unique_ptr<plane> make_plane(const cluster_config& cluster, const plane_config& pc,
                                  const instance_config& self) {
  if (pc.kind == "inproc")
    return std::make_unique<inproc_plane>(process_inproc_hub(), self.name, pc.queue_limit);
  if (pc.kind == "zmq") {
    if (pc.transport == "ipc") std::filesystem::create_directories(cluster.run_dir);
    zmq_plane_options o;
    o.self = self.name;
    o.control_endpoint = cluster.address(self, pc, "control");
    o.bulk_endpoint = cluster.address(self, pc, "bulk");
    o.queue_limit = pc.queue_limit;
    o.keys = cluster_keys_for(cluster);
    if (cluster.plane_for_flow("control").name == pc.name)
      o.read_stamp_interval = std::chrono::milliseconds(50);
    // Past the bound by two more (a late tick credits a peer up to one): peers declare a hung
    // process down, and fence it, before its connection drops (zmq_plane_options::link_timeout).
    o.link_timeout =
        std::max<std::chrono::milliseconds>(o.link_timeout, 3 * cluster.liveness_bound());
    auto p = std::make_unique<zmq_plane>(o);
    // Every instance of the config is reachable from the start; zmq connects before the peer
    // binds and delivers once it does.
    for (auto& inst : cluster.instances())
      if (inst.name != self.name)
        p->connect(inst.name, cluster.address(inst, pc, "control"),
                   cluster.address(inst, pc, "bulk"));
    return p;
  }
  if (pc.kind == "shm") {
    shm_plane_options o;
    o.ring_bytes = pc.ring_bytes;
    o.keys = shm_keys_of(cluster);
    return std::make_unique<shm_plane>(cluster.name, self.name, o);
  }
  throw std::runtime_error("plane '" + pc.name + "' of kind '" + pc.kind +
                           "' is not available in this build");
}

} // namespace supernode::transport
