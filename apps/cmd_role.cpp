#include "actors/node.hpp"
#include "apps/commands.hpp"
#include "apps/serving_setup.hpp"

namespace supernode::apps {

int cmd_role(cli_args& args) {
  auto process = args.take_positional();
  if (!process) throw usage_error("expected `role NAME --config FILE --id ID [--model DIR]`");
  auto config = args.take("--config");
  if (!config) throw usage_error("role needs --config FILE");
  const int index = static_cast<int>(args.take_int("--id", 0, 0, 1 << 20));
  auto model = args.take("--model");
  args.expect_consumed("role");
  // Roles that serve no model (echo, probes) run from configs without one.
  auto setup = load_serving_setup(*config, model, /*model_required=*/false);
  return actors::run_node(setup.cluster, setup.serving, *process, index);
}

} // namespace supernode::apps
