#pragma once
// The CAF face of a role's interface (services/<role>/<role>_interface.hpp): a typed actor that
// accepts exactly the messages the role's interface lists, each as
//
//   (inbound_atom, sender, inbound<T>)   a message from another instance, decoded by its plane
//
// plus what every role takes:
//
//   (member_atom, event)                 an instance joined, left or went down
//   (tick_atom)                          heartbeat interval elapsed: heartbeats, reports
//
// Protocol version: the interface's protocol_version.

#include "actors/protocol/type_ids.hpp"
#include "services/role_interface.hpp"

#include <memory>

namespace supernode::actors {

// A decoded message of type T, shared with the envelope it arrived in (no copy).
template<class T>
struct inbound {
  std::shared_ptr<const T> message;
};

template<class List>
struct typed_role_actor_of;
template<class... Ts>
struct typed_role_actor_of<services::message_list<Ts...>> {
  using type = caf::typed_actor<caf::reacts_to<inbound_atom, transport::peer_id, inbound<Ts>>...,
                                caf::reacts_to<member_atom, transport::membership_event>,
                                caf::reacts_to<tick_atom>>;
};

// The typed actor handle of a role whose service is `Service`.
template<services::typed_role Service>
using role_actor = typename typed_role_actor_of<typename Service::interface::accepts>::type;

} // namespace supernode::actors

namespace caf {
// In-process only, like envelopes: across processes messages travel as frames on our planes.
template<class T>
struct allowed_unsafe_message_type<supernode::actors::inbound<T>> : std::true_type {};
} // namespace caf
