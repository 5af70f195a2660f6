// The echo role's typed actor.
#include "actors/role/typed_role_actor.hpp"
#include "services/echo/echo_service.hpp"

namespace supernode::actors {

static_assert(services::typed_role<services::echo_service>);

template caf::actor
spawn_typed_role<services::echo_service>(caf::actor_system&, std::shared_ptr<transport::endpoint>,
                                         std::shared_ptr<services::echo_service>, started_fn);

} // namespace supernode::actors
