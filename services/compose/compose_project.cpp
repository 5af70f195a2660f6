#include "services/compose/compose_project.hpp"

#include "services/compose/compose_file.hpp"
#include "services/serving/cluster_file.hpp"
#include "transport/config_document.hpp"

#include <stdexcept>

namespace supernode::services::compose {

namespace fs = std::filesystem;

namespace {

// `path` as the compose file in `folder` names it: compose takes a bind mount's source as a
// path only when it starts with '.', '..' or '/'.
std::string relative_to(const fs::path& path, const fs::path& folder) {
  const auto rel = fs::absolute(path).lexically_normal().lexically_relative(
      fs::absolute(folder).lexically_normal());
  if (rel.empty()) return fs::absolute(path).lexically_normal().string();
  return rel.string().rfind("..", 0) == 0 ? rel.string() : "./" + rel.string();
}

} // namespace

std::string command_line(const compose_request& request) {
  std::string line =
      "supernode compose --config " + request.config.string() + " --network " + request.network;
  if (request.image != compose_request{}.image) line += " --image " + request.image;
  if (request.models != compose_request{}.models) line += " --models " + request.models.string();
  if (request.out) line += " --out " + request.out->string();
  return line;
}

compose_output make_compose(const compose_request& request) {
  const bool own_config = request.network == "bridge" || request.network == "swarm";
  if (own_config && !request.out)
    throw std::invalid_argument("compose --network " + request.network +
                                " needs --out FILE: the config it mounts is written beside it");
  const std::string text = transport::read_config_file(request.config);
  const auto file = cluster_file::parse(text, request.config.string());
  const fs::path folder = request.out ? request.out->parent_path() : fs::path(".");
  compose_output out;
  fs::path mounted = request.config;
  if (own_config) {
    out.bridge_config = folder / (request.config.stem().string() + "." + request.network + ".toml");
    out.bridge_config_text = bridge_config_text(text, file.cluster, request.network == "swarm");
    cluster_file::parse(out.bridge_config_text, out.bridge_config.string()); // still valid
    mounted = out.bridge_config;
  }
  compose_options options;
  options.network = request.network;
  options.image = request.image;
  options.config_file = relative_to(mounted, folder);
  options.models_dir = relative_to(request.models, folder);
  options.faults_dir = relative_to(request.config.parent_path() / "faults", folder);
  options.model_path = file.serving.model_path.string();
  options.command_line = command_line(request);
  options.decode_ranks = file.serving.decode_ranks;
  options.prefill_ranks = file.serving.prefill_ranks;
  out.yaml = compose_yaml(file.cluster, options);
  return out;
}

} // namespace supernode::services::compose
