#pragma once
// The message interface every role actor speaks (protocol version 1). Role-specific requests
// arrive as envelopes from the instance's planes; membership changes and the heartbeat clock
// arrive as their own messages.
//
//   inbound(from, envelope)   a message from another instance, decoded by its plane
//   member(event)             an instance joined, left or went down
//   tick()                    heartbeat interval elapsed: send heartbeats, expire requests

#include "actors/protocol/type_ids.hpp"

#include <string>

namespace supernode::actors {

inline constexpr int role_interface_version = 1;

using role_actor = caf::typed_actor<caf::reacts_to<inbound_atom, std::string, transport::envelope>,
                                    caf::reacts_to<member_atom, transport::membership_event>,
                                    caf::reacts_to<tick_atom>>;

} // namespace supernode::actors
