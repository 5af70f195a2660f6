#pragma once
// CurveZMQ for the zmq plane and the zmq rank fabric: every ROUTER is a CURVE server holding its
// instance's secret key, every DEALER a CURVE client that knows the key of the instance it
// connects to. A ZAP handler (RFC 27) in each context maps the public key a client proved into
// the instance that owns it (cluster_keys::owner_of), and libzmq attaches that name to every
// message of the connection as its "User-Id" property: a message is from that instance, whatever
// routing id the peer chose. Keys without an owner are refused (ZAP 400) before any message
// arrives.
//
// Routing ids carry a per-socket nonce ("decode-0#9f3a..."): the name before the last '#' is the
// identity the peer claims, the nonce keeps two connections from ever claiming one ROUTER slot,
// so a key holder posing as another instance cannot take over (router_handover) or block that
// instance's connection; it only gets its own messages rejected. Under CURVE the nonce travels
// encrypted, so nobody else learns it.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <zmq.hpp>

namespace supernode::transport {
class cluster_keys;
struct curve_keypair;
} // namespace supernode::transport

namespace supernode::transport::detail {

// A DEALER's routing id: `name` + '#' + 16 random hex digits, new for every call.
std::string connection_routing_id(std::string_view name);
// The identity a routing id claims: everything before the last '#' (all of it when there is none).
std::string_view claimed_name(std::string_view routing_id);

// Before bind: `router` answers only CURVE clients, proving itself with `own`, and asks the
// context's ZAP handler about each client.
void make_curve_server(zmq::socket_t& router, const curve_keypair& own);
// Before connect: `dealer` proves itself with `own` and accepts only the server holding the
// secret of `server_public` (Z85).
void make_curve_client(zmq::socket_t& dealer, const curve_keypair& own,
                       const std::string& server_public);

// The instance the connection of a received message proved (its "User-Id"), or nullopt when the
// connection proved none (no CURVE).
std::optional<std::string> proven_sender(const zmq::message_t& part);

// The ZAP handler of one zmq context: a REP socket at inproc://zeromq.zap.01. Construct it before
// any CURVE server of the context binds (libzmq lets every client in while no handler is bound).
// Its socket belongs to the thread that polls it; serve() answers what is waiting.
class zap_handler {
public:
  // `on_denied(address, why)` is told of every refused client (for a rate-limited line).
  zap_handler(zmq::context_t& context, std::shared_ptr<const cluster_keys> keys,
              std::function<void(const std::string& address, const std::string& why)> on_denied);
  zmq::pollitem_t poll_item() { return {socket_.handle(), 0, ZMQ_POLLIN, 0}; }
  void serve();
  void close() { socket_.close(); }

private:
  std::shared_ptr<const cluster_keys> keys_;
  std::function<void(const std::string&, const std::string&)> on_denied_;
  zmq::socket_t socket_;
};

// The handshakes a ROUTER refused (no CURVE, a key of no instance, a wrong server key, garbage),
// from a socket monitor; each refused attempt is one event. Construct before the ROUTER binds;
// the monitor socket belongs to the thread that polls it.
class handshake_watch {
public:
  handshake_watch(zmq::context_t& context, zmq::socket_t& router);
  zmq::pollitem_t poll_item() { return {monitor_.handle(), 0, ZMQ_POLLIN, 0}; }
  // Calls `on_refused(address, why)` once per refused handshake waiting in the monitor.
  void
  drain(const std::function<void(const std::string& address, const std::string& why)>& on_refused);
  // Before the ROUTER closes.
  void close();

private:
  void* router_;
  zmq::socket_t monitor_;
};

// The text of a handshake failure event (ZMQ_EVENT_HANDSHAKE_FAILED_*), or nullopt for another
// event; the client side (a DEALER's monitor) reads its own failures with it too.
std::optional<std::string> handshake_failure(uint16_t event, uint32_t value);
// The handshake events handshake_failure() understands, for zmq_socket_monitor's mask.
constexpr int handshake_failure_events = ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                         ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;

} // namespace supernode::transport::detail
