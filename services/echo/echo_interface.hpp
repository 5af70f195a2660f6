#pragma once
// The echo demo role's messages (see services/role_interface.hpp for what an interface is).

#include "services/role_interface.hpp"
#include "transport/control_messages.hpp"

namespace supernode::services {

struct echo_interface {
  static constexpr const char* role = "echo";
  static constexpr int protocol_version = 1;
  using accepts = message_list<transport::ping, transport::bulk_chunk>;
  using sends = message_list<transport::pong, transport::bulk_ack>;
};

} // namespace supernode::services
