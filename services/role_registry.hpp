#pragma once
// Role name (as written in a cluster config) -> its logic.

#include "log/log.hpp"
#include "services/role_logic.hpp"
#include "services/serving/serving_config.hpp"
#include "transport/cluster_config.hpp"

#include <memory>
#include <string>

namespace supernode::services {

// What a role instance is made from: its place in the cluster and what the cluster serves.
struct role_context {
  role_context(transport::instance_config instance, transport::cluster_config cluster,
               serving_config serving, log::logger log = {})
      : instance(std::move(instance)), cluster(std::move(cluster)), serving(std::move(serving)),
        log(std::move(log)) {}

  transport::instance_config instance;
  transport::cluster_config cluster;
  serving_config serving;
  log::logger log; // the instance's name and its process's incarnation, for its log lines
};

// Throws std::runtime_error naming the role when this build has no such role.
std::unique_ptr<role_logic> make_role_logic(const role_context& context);

} // namespace supernode::services
