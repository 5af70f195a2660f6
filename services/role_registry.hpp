#pragma once
// Role name (as written in a cluster config) -> its logic. Every role of this build is one
// alternative of role_instance, so code that needs the concrete type (the typed actor that
// hosts a role) visits it instead of guessing from the name.

#include "log/log.hpp"
#include "services/role_logic.hpp"
#include "services/serving/serving_config.hpp"
#include "transport/cluster_config.hpp"

#include <memory>
#include <string>
#include <variant>

namespace supernode::services {

class echo_service;
class gateway_service;
class scheduler_service;
class prefill_instance;
class decode_instance;
class expert_shard;
namespace ems {
class mp_controller;
class mp_server;
} // namespace ems

using role_instance =
    std::variant<std::shared_ptr<echo_service>, std::shared_ptr<gateway_service>,
                 std::shared_ptr<scheduler_service>, std::shared_ptr<prefill_instance>,
                 std::shared_ptr<decode_instance>, std::shared_ptr<expert_shard>,
                 std::shared_ptr<ems::mp_controller>, std::shared_ptr<ems::mp_server>>;

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
role_instance make_role(const role_context& context);
// The lifecycle part every role shares.
role_logic& logic_of(const role_instance& role);

} // namespace supernode::services
