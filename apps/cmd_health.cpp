#include "apps/commands.hpp"
#include "services/loadgen/http_client.hpp"
#include "services/serving/cluster_file.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace supernode::apps {

namespace {

namespace fs = std::filesystem;

// A gateway is serving when its /health answers 200 (ok, or degraded while some instance is
// down: it still takes requests).
int gateway_health(const services::serving_config& serving, const std::string& who) {
  services::loadgen::http_url url;
  url.host = serving.http_host == "0.0.0.0" ? "127.0.0.1" : serving.http_host;
  url.port = std::to_string(serving.http_port);
  const auto answer =
      services::loadgen::http_request(url, "GET", "/health", "", std::chrono::seconds(5));
  std::printf("%s: /health %u %s%s\n", who.c_str(), answer.status, answer.body.c_str(),
              answer.error.c_str());
  return answer.status == 200 ? 0 : 1;
}

// Any other process is serving while its role actors beat: they touch SUPERNODE_LIVENESS_FILE
// every tick once started (actors/role/liveness_beacon.hpp), so a missing file is a process
// still loading, and an old one a dead, stopped or hung process. Silent for longer than the
// supervisor's default patience (three liveness bounds of the cluster) is not serving.
int beacon_health(const transport::cluster_config& cluster, const std::string& who) {
  const char* file = std::getenv("SUPERNODE_LIVENESS_FILE");
  if (!file || !*file) {
    std::printf("%s: SUPERNODE_LIVENESS_FILE is not set, so nothing beats to tell\n", who.c_str());
    return 1;
  }
  std::error_code ec;
  const auto touched = fs::last_write_time(file, ec);
  if (ec) {
    std::printf("%s: not serving yet (no beat in %s)\n", who.c_str(), file);
    return 1;
  }
  const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(
      fs::file_time_type::clock::now() - touched);
  const auto bound = 3 * cluster.liveness_bound();
  std::printf("%s: last beat %lld ms ago (bound %lld ms)\n", who.c_str(),
              static_cast<long long>(silent.count()), static_cast<long long>(bound.count()));
  return silent <= bound ? 0 : 1;
}

} // namespace

// `supernode health --config FILE (--instance NAME | --process KIND)`: exit 0 when the process
// serving that instance (or, for an instance that joined at run time, of that kind) in this
// container is serving; the probe docker-compose's healthchecks run.
int cmd_health(cli_args& args) {
  auto config = args.take("--config");
  auto instance = args.take("--instance");
  auto process = args.take("--process");
  if (!config || instance.has_value() == process.has_value())
    throw usage_error("expected `health --config FILE (--instance NAME | --process KIND)`");
  args.expect_consumed("health");
  const auto file = services::cluster_file::load(*config);
  std::vector<std::string> roles;
  if (instance) {
    roles.push_back(file.cluster.instance(*instance).role); // throws naming an unknown one
    for (auto& i : file.cluster.instances())
      if (i.name == *instance)
        for (auto& p : file.cluster.processes)
          if (p.name == i.process) roles = p.roles;
  } else {
    for (auto& p : file.cluster.processes)
      if (p.name == *process) roles = p.roles;
    if (roles.empty()) throw usage_error("no process '" + *process + "' in " + *config);
  }
  const std::string who = instance ? *instance : *process;
  if (std::find(roles.begin(), roles.end(), "gateway") != roles.end())
    return gateway_health(file.serving, who);
  return beacon_health(file.cluster, who);
}

} // namespace supernode::apps
