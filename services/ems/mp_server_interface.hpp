#pragma once
// An MP server's messages (see services/role_interface.hpp for what an interface is).

#include "services/protocol/ems_messages.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/role_interface.hpp"

namespace supernode::services::ems {

struct mp_server_interface {
  static constexpr const char* role = "mp_server";
  static constexpr int protocol_version = protocol::ems_protocol_version;
  using accepts = message_list<protocol::ems_put, protocol::ems_get, protocol::ems_exists,
                               protocol::ems_remove, protocol::ems_list,
                               protocol::ems_ring_view,    // controller: ring pushes, quotas
                               protocol::ems_ring_target>; // controller: hand blocks over
  using sends =
      message_list<protocol::ems_put, protocol::ems_handover_done, protocol::ems_put_reply,
                   protocol::ems_get_reply, protocol::ems_exists_reply, protocol::ems_remove_reply,
                   protocol::ems_list_reply, protocol::ems_ring_request,
                   protocol::ems_server_report, protocol::load_report>;
};

} // namespace supernode::services::ems
