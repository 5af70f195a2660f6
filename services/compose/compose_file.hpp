#pragma once
// The docker-compose file of a deployment shape, written from the same TOML the processes read
// (`supernode compose`), so a config change never leaves a stale compose file. Pure text: no
// engine is asked anything, and the unit tests read the output without docker.
//
// One service per process slot of the config (`<process>-<i>`, started `role P --id I`): each has
// an identity the config gives it (ports, an EMS SSD tier), so it cannot be a replica. Kinds that
// may join at run time (services/cluster/join_policy.hpp) also get a service `<process>` started
// with `--join` through the gateways and schedulers, scale 0 until `--scale <process>=N` adds
// instances; a scale-down stops them with SIGTERM, which drains, within stop_grace_period.
//
// Every container mounts the config read-only, the models read-only, the run folder on a named
// volume (ipc sockets, keys, name claims; it outlives containers) and each MP server's SSD tier
// on a named volume of its own; all share the IPC and PID namespaces of a `namespaces` service,
// so the UB plane's shared memory and its pid-based peer checks work across containers.
// A run-dir service gives the volumes to the image's non-root user before anything starts.

#include "transport/cluster_config.hpp"

#include <string>

namespace supernode::services::compose {

struct compose_options {
  std::string network = "host";           // host | bridge | swarm
  std::string image = "supernode:latest"; // built by scripts/docker-build.sh
  // Paths as the compose file names them (relative to its folder, or absolute).
  std::string config_file;                 // the TOML to mount
  std::string models_dir;                  // mounted at /srv/supernode/models
  std::string faults_dir;                  // the chaos service's fault plans (configs/faults)
  std::string model_path = "models/demo";  // the config's [model] path, relative to image_home
  std::string command_line;                // how the file was made, for its header
  int drain_grace_seconds = 70;            // stop_grace_period of instances that drain on SIGTERM
  std::string shm_size = "4gb";            // the shared /dev/shm of the namespaces service
  int decode_ranks = 1, prefill_ranks = 1; // [ep]: ranks per instance (groups take no joins)
};

// Where the image keeps configs and models; configs/*.toml name models relative to it.
inline constexpr const char* image_home = "/srv/supernode";
// The uid of the image's user (docker/Dockerfile).
inline constexpr int image_uid = 10001;

// The compose file (Compose Specification, as docker-compose 1.29 and `docker stack` read it).
// host and bridge: for docker-compose, with a `chaos` service under the `chaos` profile that runs
// `supernode chaos --attach` in the instances' PID namespace. swarm: for `docker stack deploy`,
// on an overlay network, `deploy:` keys instead of docker-compose's scale/restart/cpus, and no
// shared namespaces, depends_on or chaos service (swarm has none of them).
// Throws std::invalid_argument for a network other than host, bridge or swarm.
std::string compose_yaml(const transport::cluster_config& cluster, const compose_options& options);

// For --network bridge: the config text with the zmq planes on tcp between service names
// (host "{process}": each instance binds and is reached at its own service's name); shm planes
// stay, through the shared IPC namespace. For swarm (`shm_planes_too`), the shm planes become
// zmq tcp planes as well (swarm services share no IPC namespace), and the heartbeat bound is
// 15 s (500 ms x 30): swarm starts tasks seconds apart.
std::string bridge_config_text(const std::string& config_text,
                               const transport::cluster_config& cluster,
                               bool shm_planes_too = false);

} // namespace supernode::services::compose
