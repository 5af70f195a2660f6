#pragma once
// What a role does, with no actor in it: the role actor decodes each message into a call here
// and the logic replies through the instance's endpoint. Testable without an actor system.

#include "transport/endpoint.hpp"
#include "transport/membership.hpp"
#include "transport/message.hpp"

namespace supernode::services {

class role_logic {
public:
  virtual ~role_logic() = default;
  // An application message (membership traffic never reaches here).
  virtual void on_message(const transport::peer_id& from, const transport::envelope& message,
                          transport::endpoint& out) = 0;
  virtual void on_member_event(const transport::membership_event& event, transport::endpoint& out) {
    (void)event, (void)out;
  }
};

} // namespace supernode::services
