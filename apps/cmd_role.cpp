#include "actors/node.hpp"
#include "apps/commands.hpp"
#include "apps/serving_setup.hpp"
#include "services/cluster/join_policy.hpp"
#include "transport/instance_claim.hpp"

#include <memory>
#include <sstream>

namespace supernode::apps {

namespace {

// "scheduler-0,gateway-0@tcp://10.0.0.2:7000": members to join through. A bare name is a config
// instance (its address comes from the config); NAME@ADDRESS names a member's control address.
std::vector<transport::endpoint::join_seed> parse_seeds(const std::string& text,
                                                        const transport::cluster_config& cluster) {
  std::vector<transport::endpoint::join_seed> seeds;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    const auto at = item.find('@');
    transport::endpoint::join_seed seed{item.substr(0, at),
                                        at == std::string::npos ? "" : item.substr(at + 1)};
    if (seed.control_address.empty()) cluster.instance(seed.peer); // throws naming it
    seeds.push_back(std::move(seed));
  }
  if (seeds.empty()) throw usage_error("--join needs at least one member: NAME[@ADDRESS],...");
  return seeds;
}

} // namespace

int cmd_role(cli_args& args) {
  auto process = args.take_positional();
  if (!process)
    throw usage_error("expected `role NAME --config FILE (--id ID | --join MEMBER[,MEMBER...]) "
                      "[--model DIR]`");
  auto config = args.take("--config");
  if (!config) throw usage_error("role needs --config FILE");
  auto join = args.take("--join");
  const int index = static_cast<int>(args.take_int("--id", 0, 0, 1 << 20));
  auto model = args.take("--model");
  args.expect_consumed("role");
  // Roles that serve no model (echo, probes) run from configs without one.
  auto setup = load_serving_setup(*config, model, /*model_required=*/false);
  if (!join) return actors::run_node(setup.cluster, setup.serving, *process, index);

  if (auto why = services::cluster::join_refusal(setup.cluster, setup.serving.decode_ranks,
                                                 setup.serving.prefill_ranks, *process);
      !why.empty())
    throw std::runtime_error(why);
  auto seeds = parse_seeds(*join, setup.cluster);
  std::string role;
  for (auto& p : setup.cluster.processes)
    if (p.name == *process) role = p.roles.front();
  // Held until the process ends: the name is this process's while it lives.
  const transport::instance_claim claim(setup.cluster, role);
  auto cluster = setup.cluster;
  cluster.add_joined_instance(*process, role, claim.role_index());
  return actors::run_node(cluster, setup.serving, *process, claim.role_index(), std::move(seeds));
}

} // namespace supernode::apps
