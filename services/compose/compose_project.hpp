#pragma once
// What `supernode compose` writes for one config: the compose file and, for bridge and swarm,
// the config it mounts instead (bridge_config_text), beside the compose file. Paths inside the
// compose file are relative to its folder (the chaos service's fault plans: the config's
// folder's faults/), so the files under docker/compose/ work from a
// checkout anywhere; without --out they are relative to the current folder.

#include <filesystem>
#include <optional>
#include <string>

namespace supernode::services::compose {

struct compose_request {
  std::filesystem::path config;
  std::string network = "host";
  std::string image = "supernode:latest";
  std::filesystem::path models = "models";
  std::optional<std::filesystem::path> out;
};

struct compose_output {
  std::string yaml;
  // The config the file mounts instead of request.config (bridge and swarm: <stem>.<network>.toml
  // beside it); empty for host networking.
  std::filesystem::path bridge_config;
  std::string bridge_config_text;
};

// Reads the config (strictly, as every process does); throws std::runtime_error naming what is
// wrong, std::invalid_argument for a bad network or a bridge request without `out`.
compose_output make_compose(const compose_request& request);
// The command that makes these files, as their header quotes it.
std::string command_line(const compose_request& request);

} // namespace supernode::services::compose
