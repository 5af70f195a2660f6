#pragma once
// An expert shard's messages: none. Its traffic is per-layer dispatch/combine on the rank
// fabric, never a mailbox (see services/role_interface.hpp for what an interface is).

#include "services/protocol/serving_messages.hpp"
#include "services/role_interface.hpp"

namespace supernode::services {

struct expert_shard_interface {
  static constexpr const char* role = "expert_shard";
  static constexpr int protocol_version = protocol::serving_protocol_version;
  using accepts = message_list<>;
  using sends = message_list<protocol::load_report>;
};

} // namespace supernode::services
