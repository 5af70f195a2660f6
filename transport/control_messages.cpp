#include "transport/control_messages.hpp"

#include "transport/message.hpp"

namespace supernode::transport {

void register_control_messages() {
  register_message<ping>();
  register_message<pong>();
  register_message<bulk_chunk>();
  register_message<bulk_ack>();
  register_message<heartbeat>();
  register_message<member_join>();
  register_message<member_leave>();
  register_message<member_fenced>();
  register_message<member_directory>();
}

} // namespace supernode::transport
