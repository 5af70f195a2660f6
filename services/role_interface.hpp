#pragma once
// A role's message interface, declared once per role in services/<role>/<role>_interface.hpp:
//
//   struct scheduler_interface {
//     static constexpr const char* role = "scheduler";
//     static constexpr int protocol_version = 1;
//     using accepts = message_list<admit_request, cancel_request, ...>; // what it handles
//     using sends = message_list<decode_assign, ...>;                     // what it emits
//   };
//
// The role's service names its interface (`using interface = scheduler_interface;`) and has one
// handler per accepted message,
//
//   void on(const transport::peer_id& from, const admit_request& m, transport::endpoint& out);
//
// or, to keep the decoded message (and the frame bytes it references) beyond the call,
//
//   void on(const transport::peer_id& from, std::shared_ptr<const kv_transfer> m, endpoint& out);
//
// A service that lacks a handler for a message of its interface does not compile (dispatch()
// and the typed actor in actors/role/ both call every handler). Handlers run on the role's actor
// thread, one at a time, and must not block.

#include "transport/endpoint.hpp"
#include "transport/message.hpp"

#include <memory>
#include <type_traits>

namespace supernode::services {

template<class... Ts>
struct message_list {
  static constexpr size_t size = sizeof...(Ts);
  template<class T>
  static constexpr bool contains = (std::is_same_v<T, Ts> || ...);
};

template<class Service, class T>
concept handles_by_pointer = requires(Service& s, const transport::peer_id& from,
                                      std::shared_ptr<const T> m, transport::endpoint& out) {
  s.on(from, m, out);
};
template<class Service, class T>
concept handles_by_reference = requires(Service& s, const transport::peer_id& from, const T& m,
                                        transport::endpoint& out) {
  s.on(from, m, out);
};
template<class Service, class T>
concept handles = handles_by_pointer<Service, T> || handles_by_reference<Service, T>;

template<class Service, class List>
struct implements_all : std::false_type {};
template<class Service, class... Ts>
struct implements_all<Service, message_list<Ts...>>
    : std::bool_constant<(handles<Service, Ts> && ...)> {};

// A service with a declared interface and a handler for every message in it.
template<class Service>
concept typed_role = requires {
  typename Service::interface::accepts;
  { Service::interface::role } -> std::convertible_to<const char*>;
}
&&implements_all<Service, typename Service::interface::accepts>::value;

template<class T, class Service>
void call_handler(Service& s, const transport::peer_id& from, std::shared_ptr<const T> m,
                  transport::endpoint& out) {
  if constexpr (handles_by_pointer<Service, T>)
    s.on(from, std::move(m), out);
  else
    s.on(from, *m, out);
}

// The envelope's message as T, sharing the envelope's ownership (no copy).
template<class T>
std::shared_ptr<const T> message_as(const transport::envelope& m) {
  return std::static_pointer_cast<const T>(m.object());
}

namespace detail {
template<class Service, class... Ts>
bool dispatch_in(message_list<Ts...>, Service& s, const transport::peer_id& from,
                 const transport::envelope& m, transport::endpoint& out) {
  return ((m.is<Ts>() && (call_handler<Ts>(s, from, message_as<Ts>(m), out), true)) || ...);
}
} // namespace detail

// Calls the service's handler for `m`; false (nothing called) when `m` is not in its interface.
// What the typed actor does per message, for code and tests that run a role without actors.
template<typed_role Service>
bool dispatch(Service& s, const transport::peer_id& from, const transport::envelope& m,
              transport::endpoint& out) {
  return detail::dispatch_in(typename Service::interface::accepts{}, s, from, m, out);
}

} // namespace supernode::services
