// The mp_controller role's typed actor.
#include "actors/role/typed_role_actor.hpp"
#include "services/ems/mp_controller.hpp"

namespace supernode::actors {

static_assert(services::typed_role<services::ems::mp_controller>);

template caf::actor spawn_typed_role<services::ems::mp_controller>(
    caf::actor_system&, std::shared_ptr<transport::endpoint>,
    std::shared_ptr<services::ems::mp_controller>, started_fn);

} // namespace supernode::actors
