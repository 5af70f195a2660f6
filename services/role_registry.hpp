#pragma once
// Role name (as written in a cluster config) -> its logic.

#include "services/role_logic.hpp"

#include <memory>
#include <string>

namespace supernode::services {

// Throws std::runtime_error naming the role when this build has no such role.
std::unique_ptr<role_logic> make_role_logic(const std::string& role);

} // namespace supernode::services
