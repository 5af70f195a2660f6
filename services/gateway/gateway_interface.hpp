#pragma once
// The gateway's messages (see services/role_interface.hpp for what an interface is).

#include "services/protocol/serving_messages.hpp"
#include "services/role_interface.hpp"

namespace supernode::services {

struct gateway_interface {
  static constexpr const char* role = "gateway";
  static constexpr int protocol_version = protocol::serving_protocol_version;
  using accepts = message_list<protocol::token_batch,    // decode: new tokens, last updates
                               protocol::request_placed, // scheduler: where a request runs
                               protocol::admit_rejected, // scheduler: refused, with the code
                               protocol::cluster_stats>; // scheduler: every tick, for /metrics
  using sends = message_list<protocol::admit_request, protocol::cancel_request,
                             protocol::decode_batch_cap>; // gateway-0's planner: to decode
};

} // namespace supernode::services
