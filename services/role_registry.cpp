#include "services/role_registry.hpp"

#include "services/decode/decode_instance.hpp"
#include "services/echo/echo_service.hpp"
#include "services/gateway/gateway_service.hpp"
#include "services/prefill/prefill_instance.hpp"
#include "services/scheduler/scheduler_service.hpp"
#include "services/serving/model_store.hpp"

#include <stdexcept>

namespace supernode::services {

std::unique_ptr<role_logic> make_role_logic(const role_context& c) {
  const auto& role = c.instance.role;
  if (role == "echo") return std::make_unique<echo_service>();
  if (role == "scheduler") return std::make_unique<scheduler_service>(c.serving, c.cluster);
  if (role == "gateway") return std::make_unique<gateway_service>(c.serving);
  if (role == "prefill")
    return std::make_unique<prefill_instance>(
        shared_weights(c.serving.model_path, c.serving.precision), c.serving);
  if (role == "decode")
    return std::make_unique<decode_instance>(
        shared_weights(c.serving.model_path, c.serving.precision), c.serving);
  throw std::runtime_error("role '" + role +
                           "' is not implemented in this build (known: echo, gateway, scheduler, "
                           "prefill, decode)");
}

} // namespace supernode::services
