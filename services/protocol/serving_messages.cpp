#include "services/protocol/serving_messages.hpp"

#include "transport/control_messages.hpp"
#include "transport/message.hpp"

#include <mutex>

namespace supernode::services::protocol {

void register_serving_messages() {
  static std::once_flag once;
  std::call_once(once, [] {
    using transport::register_message;
    transport::register_control_messages();
    register_message<admit_request>();
    register_message<decode_assign_result>();
    register_message<load_report>();
    register_message<cancel_request>();
    register_message<admit_rejected>();
    register_message<request_placed>();
    register_message<token_batch>();
    register_message<cluster_stats>();
    register_message<decode_assign>();
    register_message<kv_transfer>();
    register_message<prefill_failed>();
    register_message<decode_batch_cap>();
    register_message<prefill_request>();
    register_message<moved_kv_received>();
  });
}

} // namespace supernode::services::protocol
