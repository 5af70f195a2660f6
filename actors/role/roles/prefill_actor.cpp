// The prefill role's typed actor.
#include "actors/role/typed_role_actor.hpp"
#include "services/prefill/prefill_instance.hpp"

namespace supernode::actors {

static_assert(services::typed_role<services::prefill_instance>);

template caf::actor spawn_typed_role<services::prefill_instance>(
    caf::actor_system&, std::shared_ptr<transport::endpoint>,
    std::shared_ptr<services::prefill_instance>, started_fn);

} // namespace supernode::actors
