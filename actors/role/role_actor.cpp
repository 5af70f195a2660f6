#include "actors/role/role_actor.hpp"

#include <caf/actor.hpp>

namespace supernode::actors {

caf::actor spawn_role(caf::actor_system& system, std::shared_ptr<transport::endpoint> endpoint,
                      const services::role_instance& role, started_fn started) {
  return std::visit(
      [&](const auto& logic) {
        return spawn_typed_role(system, std::move(endpoint), logic, std::move(started));
      },
      role);
}

} // namespace supernode::actors
