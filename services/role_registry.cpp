#include "services/role_registry.hpp"

#include "services/echo/echo_service.hpp"

#include <stdexcept>

namespace supernode::services {

std::unique_ptr<role_logic> make_role_logic(const std::string& role) {
  if (role == "echo") return std::make_unique<echo_service>();
  throw std::runtime_error("role '" + role + "' is not implemented in this build (known: echo)");
}

} // namespace supernode::services
