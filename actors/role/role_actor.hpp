#pragma once
// One role instance as an actor. Lifecycle:
//   spawned -> running (planes started, heartbeats every interval) -> exit (leave announced,
//   planes stopped). The actor only relays: plane threads post inbound/member messages to it,
//   it calls the role's logic, which replies through the endpoint.

#include "actors/role/role_interface.hpp"
#include "services/role_logic.hpp"
#include "transport/endpoint.hpp"

#include <functional>
#include <memory>
#include <string>

namespace supernode::actors {

struct role_state {
  std::shared_ptr<transport::endpoint> endpoint;
  std::shared_ptr<services::role_logic> logic;
  static inline const char* name = "role";
  ~role_state();
};

// `started` is called once, from the actor, when the endpoint and the logic are up, with an
// empty string, or with the reason they could not start (the actor then quits).
using started_fn = std::function<void(const std::string& error)>;

role_actor::behavior_type role_behavior(role_actor::stateful_pointer<role_state> self,
                                        std::shared_ptr<transport::endpoint> endpoint,
                                        std::shared_ptr<services::role_logic> logic,
                                        started_fn started);

} // namespace supernode::actors
