#include "actors/node.hpp"
#include "apps/commands.hpp"
#include "apps/serving_setup.hpp"
#include "services/cluster/join_policy.hpp"

namespace supernode::apps {

int cmd_role(cli_args& args) {
  auto process = args.take_positional();
  if (!process)
    throw usage_error("expected `role NAME --config FILE (--id ID | --join MEMBER[,MEMBER...]) "
                      "[--as prefill|decode] [--model DIR]`");
  auto config = args.take("--config");
  if (!config) throw usage_error("role needs --config FILE");
  auto join = args.take("--join");
  if (join && join->empty()) throw usage_error("--join needs at least one member: NAME[@ADDRESS]");
  auto serve_as = args.take("--as");
  const int index = static_cast<int>(args.take_int("--id", 0, 0, 1 << 20));
  auto model = args.take("--model");
  args.expect_consumed("role");
  // Roles that serve no model (echo, probes) run from configs without one.
  auto setup = load_serving_setup(*config, model, /*model_required=*/false);
  if (!join && !serve_as) return actors::run_node(setup.cluster, setup.serving, *process, index);

  // A process beyond the config's (--join), or one that serves the other of prefill and decode
  // (--as, after a role switch it is restarted in): either way a joined instance.
  std::string role;
  for (auto& p : setup.cluster.processes)
    if (p.name == *process) role = p.roles.front();
  const auto& c = setup.cluster;
  const auto why =
      serve_as ? services::cluster::switch_refusal(c, setup.serving.decode_ranks,
                                                   setup.serving.prefill_ranks, *process, *serve_as)
               : services::cluster::join_refusal(c, setup.serving.decode_ranks,
                                                 setup.serving.prefill_ranks, *process);
  if (!why.empty()) throw std::runtime_error(why);
  actors::node_join joining{
      serve_as ? *serve_as : role,
      actors::parse_join_seeds(join ? *join : services::cluster::default_join_seeds(c), c)};
  return actors::run_node(c, setup.serving, *process, index, std::move(joining));
}

} // namespace supernode::apps
