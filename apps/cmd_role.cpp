#include "actors/node.hpp"
#include "apps/commands.hpp"
#include "transport/cluster_config.hpp"

namespace supernode::apps {

int cmd_role(cli_args& args) {
  auto process = args.take_positional();
  if (!process) throw usage_error("expected `role NAME --config FILE --id ID`");
  auto config = args.take("--config");
  if (!config) throw usage_error("role needs --config FILE");
  const int index = static_cast<int>(args.take_int("--id", 0, 0, 1 << 20));
  args.expect_consumed("role");
  return actors::run_node(transport::cluster_config::load(*config), *process, index);
}

} // namespace supernode::apps
