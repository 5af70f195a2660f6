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
    auto weights =
        shared_weights(c.serving.model_path, c.serving.precision, c.serving.kv_with_mtp());
    auto group =
        ep_membership_of(c.cluster, c.serving, c.instance, weights->config, weights->prec, c.log);
    return std::make_shared<prefill_instance>(weights, c.serving, std::move(group));
  }
  if (role == "decode") {
    c.serving.check_sizes_against_model(); // before the weights and the KV pool are allocated
    auto weights =
        shared_weights(c.serving.model_path, c.serving.precision, c.serving.kv_with_mtp());
    auto group =
        ep_membership_of(c.cluster, c.serving, c.instance, weights->config, weights->prec, c.log);
    return std::make_shared<decode_instance>(weights, c.serving, std::move(group));
  }
  if (role == "mp_controller")
    return std::make_shared<ems::mp_controller>(c.cluster, c.serving.ems);
  if (role == "mp_server")
    return std::make_shared<ems::mp_server>(c.cluster, c.instance.name, c.serving.ems);
  if (role == "expert_shard") {
    auto weights =
        shared_weights(c.serving.model_path, c.serving.precision, c.serving.kv_with_mtp());
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

} // namespace supernode::services
