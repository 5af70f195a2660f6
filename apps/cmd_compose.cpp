#include "apps/commands.hpp"
#include "services/compose/compose_project.hpp"

#include <cstdio>
#include <fstream>

namespace supernode::apps {

namespace {

void write_file(const std::filesystem::path& file, const std::string& text) {
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary);
  out << text;
  if (!out.flush()) throw std::runtime_error("cannot write " + file.string());
}

} // namespace

// `supernode compose --config FILE [--network host|bridge|swarm] [--image NAME] [--models DIR]
// [--out FILE]`: services/compose/compose_project.hpp.
int cmd_compose(cli_args& args) {
  services::compose::compose_request request;
  auto config = args.take("--config");
  if (!config)
    throw usage_error(
        "expected `compose --config FILE [--network host|bridge|swarm] [--image NAME] "
        "[--models DIR] [--out FILE]`");
  request.config = *config;
  request.network = args.take_or("--network", request.network);
  if (request.network != "host" && request.network != "bridge" && request.network != "swarm")
    throw usage_error("--network is host, bridge or swarm, not '" + request.network + "'");
  request.image = args.take_or("--image", request.image);
  request.models = args.take_or("--models", request.models.string());
  if (auto out = args.take("--out")) request.out = *out;
  args.expect_consumed("compose");
  const auto made = services::compose::make_compose(request);
  if (!made.bridge_config.empty()) write_file(made.bridge_config, made.bridge_config_text);
  if (!request.out) {
    std::fputs(made.yaml.c_str(), stdout);
    return 0;
  }
  write_file(*request.out, made.yaml);
  std::fprintf(stderr, "compose: wrote %s%s%s\n", request.out->c_str(),
               made.bridge_config.empty() ? "" : " and ", made.bridge_config.c_str());
  return 0;
}

} // namespace supernode::apps
