#include "apps/commands.hpp"
#include "services/serving/cluster_file.hpp"

#include <cstdio>

namespace supernode::apps {

// `config keys`: every table and key a cluster file may hold, as docs/configuration.md lists
// them (its generated part is checked against this output). `config check --config FILE`:
// reads FILE as every process would, without starting anything.
int cmd_config(cli_args& args) {
  const auto action = args.take_positional();
  if (action == "keys") {
    args.expect_consumed("config keys");
    const auto tables = services::cluster_file::tables();
    std::fputs(transport::config_reference_markdown(tables).c_str(), stdout);
    return 0;
  }
  const auto config = args.take("--config");
  if (action != "check" || !config)
    throw usage_error("expected `config keys` or `config check --config FILE`");
  args.expect_consumed("config check");
  const auto file = services::cluster_file::load(*config);
  std::printf("%s: ok (process kinds: %zu, role instances: %zu)\n", config->c_str(),
              file.cluster.processes.size(), file.cluster.instances().size());
  return 0;
}

} // namespace supernode::apps
