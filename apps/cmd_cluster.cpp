#include "apps/cluster_runner.hpp"
#include "apps/commands.hpp"

namespace supernode::apps {

int cmd_cluster(cli_args& args) {
  auto action = args.take_positional();
  auto config = args.take("--config");
  auto model = args.take("--model");
  if (!action || (*action != "up" && *action != "status" && *action != "down") || !config)
    throw usage_error("expected `cluster up|status|down --config FILE [--model DIR]`");
  args.expect_consumed("cluster " + *action);
  // Only `up` starts roles that load the model; the others just find the processes.
  const bool up = *action == "up";
  auto setup = load_serving_setup(*config, model, up);
  if (up) return cluster_up(setup, *config);
  if (*action == "status") return cluster_status(setup);
  return cluster_down(setup);
}

} // namespace supernode::apps
