#pragma once
// Role name (as written in a cluster config) -> its logic.

#include "services/role_logic.hpp"
#include "services/serving/serving_config.hpp"
#include "transport/cluster_config.hpp"

#include <memory>
#include <string>

namespace supernode::services {

// What a role instance is made from: its place in the cluster and what the cluster serves.
struct role_context {
  transport::instance_config instance;
  transport::cluster_config cluster;
  serving_config serving;
};

// Throws std::runtime_error naming the role when this build has no such role.
std::unique_ptr<role_logic> make_role_logic(const role_context& context);

} // namespace supernode::services
