#pragma once
// What a role does, with no actor in it: its lifecycle, membership events and the heartbeat
// tick. Its messages arrive through the typed handlers its interface declares (role_interface.hpp);
// the logic replies through the instance's endpoint. Testable without an actor system.
// Roles that compute (prefill, decode) or serve HTTP (gateway) run their own threads between
// start() and stop(); everything else is called on the actor's thread, one call at a time.

#include "services/serving/drain_mode.hpp"
#include "transport/endpoint.hpp"
#include "transport/membership.hpp"
#include "transport/message.hpp"

#include <string>

namespace supernode::services {

class role_logic {
public:
  virtual ~role_logic() = default;
  // After the endpoint started; `out` outlives the logic's threads (stopped in stop()).
  virtual void start(transport::endpoint& out) { (void)out; }
  // Before the endpoint stops: join the logic's threads. Idempotent.
  virtual void stop() {}
  virtual void on_member_event(const transport::membership_event& event, transport::endpoint& out) {
    (void)event, (void)out;
  }
  // Every heartbeat interval: periodic reports.
  virtual void on_tick(transport::endpoint& out) { (void)out; }
  // Asks the instance to drain; any thread (instances keep what it changes in atomics). An
  // instance with nothing to hand over is drained at once.
  virtual void drain(drain_mode mode) { (void)mode; }
  // True once a drain asked for has ended: nothing left here that leaving would cut short.
  virtual bool drained() const { return true; }
  // Where clients reach the instance, if anywhere ("http://127.0.0.1:8000"); empty otherwise.
  virtual std::string public_address() const { return {}; }
};

} // namespace supernode::services
