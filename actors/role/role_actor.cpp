#include "actors/role/role_actor.hpp"

#include <chrono>
#include <cstdio>

namespace supernode::actors {

role_state::~role_state() {
  if (logic) logic->stop();
  if (endpoint) {
    endpoint->announce_leave("shutdown");
    endpoint->stop();
  }
}

role_actor::behavior_type role_behavior(role_actor::stateful_pointer<role_state> self,
                                        std::shared_ptr<transport::endpoint> endpoint,
                                        std::shared_ptr<services::role_logic> logic,
                                        started_fn started) {
  self->state.endpoint = endpoint;
  self->state.logic = logic;
  // Plane threads hand messages to the actor; after the actor is gone the sends are dropped.
  auto handle = caf::actor_cast<role_actor>(self);
  endpoint->set_message_handler([handle](const transport::peer_id& from, transport::envelope m) {
    caf::anon_send(handle, inbound_atom_v, from, std::move(m));
  });
  endpoint->set_event_handler(
      [handle](const transport::membership_event& e) { caf::anon_send(handle, member_atom_v, e); });
  try {
    endpoint->start();
    logic->start(*endpoint);
    if (started) started("");
    self->send(self, tick_atom_v);
  } catch (const std::exception& e) {
    if (started) started(endpoint->self() + ": " + e.what());
    self->quit(caf::sec::runtime_error); // takes effect once this initialisation returns
  }
  // One bad message must not take the instance down with every request it holds: the logic's
  // exceptions are reported and the actor goes on.
  auto guarded = [self](const char* what, auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: error handling %s: %s\n", self->state.endpoint->self().c_str(),
                   what, e.what());
    }
  };
  return {
      [self, guarded](inbound_atom, const std::string& from, const transport::envelope& m) {
        guarded("a message",
                [&] { self->state.logic->on_message(from, m, *self->state.endpoint); });
      },
      [self, guarded](member_atom, const transport::membership_event& e) {
        guarded("a membership event",
                [&] { self->state.logic->on_member_event(e, *self->state.endpoint); });
      },
      [self, guarded](tick_atom) {
        auto& ep = *self->state.endpoint;
        ep.tick(std::chrono::steady_clock::now());
        guarded("a tick", [&] { self->state.logic->on_tick(ep); });
        self->delayed_send(self, ep.cluster().heartbeat_interval, tick_atom_v);
      },
  };
}

} // namespace supernode::actors
