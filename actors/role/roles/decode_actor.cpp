// The decode role's typed actor.
#include "actors/role/typed_role_actor.hpp"
#include "services/decode/decode_instance.hpp"

namespace supernode::actors {

static_assert(services::typed_role<services::decode_instance>);

template caf::actor
spawn_typed_role<services::decode_instance>(caf::actor_system&,
                                            std::shared_ptr<transport::endpoint>,
                                            std::shared_ptr<services::decode_instance>, started_fn);

} // namespace supernode::actors
