// The expert_shard role's typed actor.
#include "actors/role/typed_role_actor.hpp"
#include "services/moe/expert_shard.hpp"

namespace supernode::actors {

static_assert(services::typed_role<services::expert_shard>);

template caf::actor
spawn_typed_role<services::expert_shard>(caf::actor_system&, std::shared_ptr<transport::endpoint>,
                                         std::shared_ptr<services::expert_shard>, started_fn);

} // namespace supernode::actors
