#pragma once
// The project's one CAF type-ID block: every atom and every type an actor message carries.
// Envelopes and membership events are process-local (they hold shared pointers to decoded
// messages); across processes, messages travel as frames on our planes, never through CAF.

#include "transport/membership.hpp"
#include "transport/message.hpp"

#include <caf/all.hpp>
#include <string>

CAF_BEGIN_TYPE_ID_BLOCK(supernode, caf::first_custom_type_id)

CAF_ADD_ATOM(supernode, supernode::actors, inbound_atom, "inbound")
CAF_ADD_ATOM(supernode, supernode::actors, member_atom, "member")
CAF_ADD_ATOM(supernode, supernode::actors, tick_atom, "tick")

CAF_END_TYPE_ID_BLOCK(supernode)

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(supernode::transport::envelope)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(supernode::transport::membership_event)
