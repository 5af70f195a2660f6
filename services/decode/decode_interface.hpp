#pragma once
// A decode instance's messages (see services/role_interface.hpp for what an interface is).

#include "services/protocol/ems_messages.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/role_interface.hpp"

namespace supernode::services {

struct decode_interface {
  static constexpr const char* role = "decode";
  static constexpr int protocol_version = protocol::serving_protocol_version;
  using accepts = message_list<protocol::decode_assign,    // scheduler: reserve KV, start it
                               protocol::kv_transfer,      // prefill: a run of the prompt's KV
                               protocol::prefill_failed,   // prefill: the prompt cannot be done
                               protocol::cancel_request,   // gateway or scheduler
                               protocol::decode_batch_cap, // gateway: the planner's cap
                               protocol::ems_ring_view,    // MP controller: the pool's ring
                               // Another decode instance: the KV of a sequence moving off this
                               // draining one, and that it arrived.
                               protocol::prefill_request, protocol::moved_kv_received>;
  using sends =
      message_list<protocol::decode_assign_result, protocol::prefill_request, protocol::token_batch,
                   protocol::load_report, protocol::ems_put, protocol::kv_transfer,
                   protocol::prefill_failed, protocol::moved_kv_received>;
};

} // namespace supernode::services
