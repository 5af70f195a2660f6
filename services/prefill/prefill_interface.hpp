#pragma once
// A prefill instance's messages (see services/role_interface.hpp for what an interface is).

#include "services/protocol/ems_messages.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/role_interface.hpp"

namespace supernode::services {

struct prefill_interface {
  static constexpr const char* role = "prefill";
  static constexpr int protocol_version = protocol::serving_protocol_version;
  using accepts = message_list<protocol::prefill_request, // decode: a prompt to prefill
                               protocol::cancel_request,  // decode or scheduler
                               protocol::ems_ring_view>;  // MP controller: the pool's ring
  using sends = message_list<protocol::kv_transfer, protocol::prefill_failed, protocol::load_report,
                             protocol::ems_get, protocol::ems_put>;
};

} // namespace supernode::services
