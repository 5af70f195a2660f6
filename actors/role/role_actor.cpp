#include "actors/role/role_actor.hpp"

#include <chrono>

namespace supernode::actors {

role_state::~role_state() {
  if (endpoint) {
    endpoint->announce_leave("shutdown");
    endpoint->stop();
  }
}

role_actor::behavior_type role_behavior(role_actor::stateful_pointer<role_state> self,
                                        std::shared_ptr<transport::endpoint> endpoint,
                                        std::shared_ptr<services::role_logic> logic) {
  self->state.endpoint = endpoint;
  self->state.logic = logic;
  // Plane threads hand messages to the actor; after the actor is gone the sends are dropped.
  auto handle = caf::actor_cast<role_actor>(self);
  endpoint->set_message_handler([handle](const transport::peer_id& from, transport::envelope m) {
    caf::anon_send(handle, inbound_atom_v, from, std::move(m));
  });
  endpoint->set_event_handler(
      [handle](const transport::membership_event& e) { caf::anon_send(handle, member_atom_v, e); });
  endpoint->start();
  self->send(self, tick_atom_v);
  return {
      [self](inbound_atom, const std::string& from, const transport::envelope& m) {
        self->state.logic->on_message(from, m, *self->state.endpoint);
      },
      [self](member_atom, const transport::membership_event& e) {
        self->state.logic->on_member_event(e, *self->state.endpoint);
      },
      [self](tick_atom) {
        auto& ep = *self->state.endpoint;
        ep.tick(std::chrono::steady_clock::now());
        self->delayed_send(self, ep.cluster().heartbeat_interval, tick_atom_v);
      },
  };
}

} // namespace supernode::actors
