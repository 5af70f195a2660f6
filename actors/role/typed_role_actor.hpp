#pragma once
// The typed role actor's definition, included only by the files that instantiate it for one role
// (actors/role/roles/*.cpp): CAF templates are heavy to compile, one role per file keeps each
// file's compile short and lets two cores build them in parallel.

#include "actors/role/handler_watch.hpp"
#include "actors/role/liveness_beacon.hpp"
#include "actors/role/role_actor.hpp"
#include "actors/role/role_interface.hpp"

#include <chrono>

namespace supernode::actors {

template<class Service>
struct typed_role_state {
  std::shared_ptr<transport::endpoint> endpoint;
  std::shared_ptr<Service> logic;
  // Handler errors a peer can provoke at will (a message that makes the logic throw): one line
  // per handler per interval, with a count.
  log::rate_limiter handler_errors;
  static inline const char* name = Service::interface::role;
  ~typed_role_state() {
    if (logic) logic->stop();
    if (endpoint) {
      endpoint->announce_leave("shutdown");
      endpoint->stop();
    }
  }
};

namespace detail {

// On the plane's receive thread: the message as its typed actor message, or false when the
// interface lacks its type.
template<class Handle, class... Ts>
bool relay(services::message_list<Ts...>, const Handle& to, const transport::peer_id& from,
           const transport::envelope& m) {
  return ((m.is<Ts>() &&
           (caf::anon_send(to, inbound_atom_v, from, inbound<Ts>{services::message_as<Ts>(m)}),
            true)) ||
          ...);
}

// One bad message must not take the instance down with every request it holds: the logic's
// exceptions are reported (rate-limited per handler) and the actor goes on.
template<class State, class Fn>
void guarded(State& state, const char* what, Fn&& fn) {
  handler_watch watch(state.endpoint->log(), what);
  try {
    fn();
  } catch (const std::exception& e) {
    state.endpoint->log().limited(state.handler_errors, log::level::error, what,
                                  "error handling {}: {}", what, e.what());
  }
}

template<class Service, class Self, class T>
auto message_handler(Self self) {
  return [self](inbound_atom, const transport::peer_id& from, const inbound<T>& m) {
    auto& st = self->state;
    guarded(st, T::type_name,
            [&] { services::call_handler<T>(*st.logic, from, m.message, *st.endpoint); });
  };
}

template<class Service, class Self, class... Ts>
typename role_actor<Service>::behavior_type behavior_of(services::message_list<Ts...>, Self self) {
  return {
      message_handler<Service, Self, Ts>(self)...,
      [self](member_atom, const transport::membership_event& e) {
        guarded(self->state, "a membership event",
                [&] { self->state.logic->on_member_event(e, *self->state.endpoint); });
      },
      [self](tick_atom) {
        auto& ep = *self->state.endpoint;
        ep.tick(std::chrono::steady_clock::now());
        guarded(self->state, "a tick", [&] { self->state.logic->on_tick(ep); });
        liveness_beat();
        self->delayed_send(self, ep.cluster().heartbeat_interval, tick_atom_v);
      },
  };
}

template<class Service>
typename role_actor<Service>::behavior_type typed_role_behavior(
    typename role_actor<Service>::template stateful_pointer<typed_role_state<Service>> self,
    std::shared_ptr<transport::endpoint> endpoint, std::shared_ptr<Service> logic,
    started_fn started) {
  using accepts = typename Service::interface::accepts;
  self->state.endpoint = endpoint;
  self->state.logic = logic;
  // Plane threads hand messages to the actor; after the actor is gone the sends are dropped.
  auto handle = caf::actor_cast<role_actor<Service>>(self);
  transport::endpoint* ep = endpoint.get(); // owns the handler, so outlives it
  endpoint->set_message_handler(
      [handle, ep](const transport::peer_id& from, transport::envelope m) {
        if (!relay(accepts{}, handle, from, m))
          ep->count_unexpected(from, m.type(), Service::interface::role);
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
  return behavior_of<Service>(accepts{}, self);
}

} // namespace detail

template<class Service>
caf::actor spawn_typed_role(caf::actor_system& system,
                            std::shared_ptr<transport::endpoint> endpoint,
                            std::shared_ptr<Service> logic, started_fn started) {
  auto typed = system.spawn(detail::typed_role_behavior<Service>, std::move(endpoint),
                            std::move(logic), std::move(started));
  return caf::actor_cast<caf::actor>(typed);
}

} // namespace supernode::actors
