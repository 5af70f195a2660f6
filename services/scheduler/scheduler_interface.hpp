#pragma once
// The scheduler's messages (see services/role_interface.hpp for what an interface is).

#include "services/protocol/serving_messages.hpp"
#include "services/role_interface.hpp"

namespace supernode::services {

struct scheduler_interface {
  static constexpr const char* role = "scheduler";
  static constexpr int protocol_version = protocol::serving_protocol_version;
  using accepts = message_list<protocol::admit_request,        // gateway: a new request
                               protocol::cancel_request,       // gateway: the client went away
                               protocol::decode_assign_result, // decode: accepted or refused
                               protocol::load_report>;         // every instance, each tick
  using sends =
      message_list<protocol::admit_rejected, protocol::request_placed, protocol::cluster_stats,
                   protocol::decode_assign, protocol::cancel_request>;
};

} // namespace supernode::services
