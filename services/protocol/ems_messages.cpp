#include "services/protocol/ems_messages.hpp"

#include "transport/control_messages.hpp"
#include "transport/message.hpp"

#include <mutex>

namespace supernode::services::protocol {

void register_ems_messages() {
  static std::once_flag once;
  std::call_once(once, [] {
    using transport::register_message;
    transport::register_control_messages();
    register_message<ems_ring_request>();
    register_message<ems_model_claim>();
    register_message<ems_model_register>();
    register_message<ems_server_report>();
    register_message<ems_handover_done>();
    register_message<ems_ring_view>();
    register_message<ems_ring_target>();
    register_message<ems_model_claimed>();
    register_message<ems_model_registered>();
    register_message<ems_put>();
    register_message<ems_get>();
    register_message<ems_exists>();
    register_message<ems_remove>();
    register_message<ems_list>();
    register_message<ems_put_reply>();
    register_message<ems_get_reply>();
    register_message<ems_exists_reply>();
    register_message<ems_remove_reply>();
    register_message<ems_list_reply>();
  });
}

} // namespace supernode::services::protocol
