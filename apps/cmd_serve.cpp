#include "actors/node.hpp"
#include "apps/commands.hpp"
#include "apps/embedded_config.hpp"
#include "apps/serving_setup.hpp"

namespace supernode::apps {

int cmd_serve(cli_args& args) {
  auto config_file = args.take("--config");
  auto model = args.take("--model");
  auto host = args.take("--host");
  const auto port = args.take_int("--port", -1, 0, 65535);
  const bool allow_unauthenticated = args.take_flag("--allow-unauthenticated");
  args.expect_consumed("serve");

  auto setup = config_file ? load_serving_setup(*config_file, model)
                           : parse_serving_setup(embedded_config, embedded_config_name, model);
  if (host) setup.serving.http_host = *host;
  if (port >= 0) setup.serving.http_port = static_cast<int>(port);
  if (allow_unauthenticated) setup.serving.allow_unauthenticated = true;
  const auto& processes = setup.cluster.processes;
  if (processes.size() != 1 || processes.front().count != 1)
    throw usage_error(setup.source +
                      " describes several processes: start them with `supernode cluster up "
                      "--config " +
                      setup.source + "`");
  return actors::run_node(setup.cluster, setup.serving, processes.front().name, 0);
}

} // namespace supernode::apps
