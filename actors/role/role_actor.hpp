#pragma once
// One role instance as a typed actor over its interface (role_interface.hpp). Lifecycle:
//   spawned -> running (planes started, heartbeats every interval) -> exit (leave announced,
//   planes stopped). The actor only relays: a plane's receive thread decodes each frame and sends
//   the typed message to the actor's handle; the actor calls the service's handler for it, which
//   replies through the endpoint. A frame whose type is not in the interface never reaches the
//   actor: the endpoint counts it and logs it once per type.

#include "services/role_registry.hpp"
#include "transport/endpoint.hpp"

#include <caf/fwd.hpp>
#include <functional>
#include <memory>
#include <string>

namespace supernode::actors {

// `started` is called once, from the actor, when the endpoint and the logic are up, with an
// empty string, or with the reason they could not start (the actor then quits).
using started_fn = std::function<void(const std::string& error)>;

// Spawns the typed actor of whichever role `role` holds (each role's in its own file under
// actors/role/roles/, where the typed actor is instantiated).
caf::actor spawn_role(caf::actor_system& system, std::shared_ptr<transport::endpoint> endpoint,
                      const services::role_instance& role, started_fn started = {});

template<class Service>
caf::actor spawn_typed_role(caf::actor_system& system,
                            std::shared_ptr<transport::endpoint> endpoint,
                            std::shared_ptr<Service> logic, started_fn started);

} // namespace supernode::actors
