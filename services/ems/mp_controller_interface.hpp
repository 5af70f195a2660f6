#pragma once
// The MP controller's messages (see services/role_interface.hpp for what an interface is).

#include "services/protocol/ems_messages.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/role_interface.hpp"

namespace supernode::services::ems {

struct mp_controller_interface {
  static constexpr const char* role = "mp_controller";
  static constexpr int protocol_version = protocol::ems_protocol_version;
  using accepts = message_list<protocol::ems_ring_request,   // servers and clients
                               protocol::ems_model_claim,    // model cache: who fetches M?
                               protocol::ems_model_register, // model cache: M is in the pool
                               protocol::ems_server_report,  // servers: what they hold
                               protocol::ems_handover_done>; // servers: a ring change's blocks
  using sends =
      message_list<protocol::ems_ring_view, protocol::ems_ring_target, protocol::ems_model_claimed,
                   protocol::ems_model_registered, protocol::ems_remove, protocol::load_report>;
};

} // namespace supernode::services::ems
