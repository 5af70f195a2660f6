#include "services/role_registry.hpp"

#include "services/decode/decode_instance.hpp"
#include "services/echo/echo_service.hpp"
#include "services/ems/mp_controller.hpp"
#include "services/ems/mp_server.hpp"
#include "services/gateway/gateway_service.hpp"
#include "services/moe/expert_shard.hpp"
#include "services/prefill/prefill_instance.hpp"
#include "services/scheduler/scheduler_service.hpp"
#include "services/serving/model_store.hpp"

#include <stdexcept>

namespace supernode::services {

role_instance make_role(const role_context& c) {
  const auto& role = c.instance.role;
  if (role == "echo") return std::make_shared<echo_service>();
  if (role == "scheduler") return std::make_shared<scheduler_service>(c.serving, c.cluster);
  if (role == "gateway") return std::make_shared<gateway_service>(c.serving);
  if (role == "prefill") {
    c.serving.check_sizes_against_model(); // before the weights and the KV pool are allocated
    auto weights = shared_weights(c.serving.model_path, c.serving.precision);
    auto group =
        ep_membership_of(c.cluster, c.serving, c.instance, weights->config, weights->prec, c.log);
    return std::make_shared<prefill_instance>(weights, c.serving, std::move(group));
  }
  if (role == "decode") {
    c.serving.check_sizes_against_model(); // before the weights and the KV pool are allocated
    auto weights = shared_weights(c.serving.model_path, c.serving.precision);
    auto group =
        ep_membership_of(c.cluster, c.serving, c.instance, weights->config, weights->prec, c.log);
    return std::make_shared<decode_instance>(weights, c.serving, std::move(group));
  }
  if (role == "mp_controller")
    return std::make_shared<ems::mp_controller>(c.cluster, c.serving.ems);
  if (role == "mp_server")
    return std::make_shared<ems::mp_server>(c.cluster, c.instance.name, c.serving.ems);
  if (role == "expert_shard") {
    auto weights = shared_weights(c.serving.model_path, c.serving.precision);
    auto group =
        ep_membership_of(c.cluster, c.serving, c.instance, weights->config, weights->prec, c.log);
    if (!group) throw std::runtime_error(c.instance.name + ": an expert shard needs decode ranks");
    return std::make_shared<expert_shard>(weights, std::move(*group));
  }
  throw std::runtime_error("role '" + role +
                           "' is not implemented in this build (known: echo, gateway, scheduler, "
                           "prefill, decode, expert_shard, mp_controller, mp_server)");
}

role_logic& logic_of(const role_instance& role) {
  return std::visit([](auto& r) -> role_logic& { return *r; }, role);
}

std::string join_refusal(const transport::cluster_config& cluster, const serving_config& serving,
                         const std::string& process) {
  const transport::process_config* kind = nullptr;
  for (auto& p : cluster.processes)
    if (p.name == process) kind = &p;
  if (!kind) return "no process '" + process + "' in cluster '" + cluster.name + "'";
  const std::string what = "process '" + process + "' cannot join at run time: ";
  if (kind->roles.size() != 1 || kind->per_process != 1)
    return what + "it hosts more than one role instance (joins take one per process)";
  const auto& role = kind->roles.front();
  if (role != "prefill" && role != "decode")
    return what + "its role '" + role + "' takes members only as the config lists them (joins " +
           "take prefill and decode instances)";
  const bool grouped = role == "decode" ? serving.decode_ranks != 1 : serving.prefill_ranks != 1;
  bool shards = false;
  for (auto& i : cluster.instances()) shards |= role == "decode" && i.role == "expert_shard";
  if (grouped || shards)
    return what + "its " + role + " instances form expert-parallel groups, which resize only " +
           "as the config lists them";
  return "";
}

} // namespace supernode::services
