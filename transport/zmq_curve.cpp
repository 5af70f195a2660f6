#include "transport/zmq_curve.hpp"

#include "transport/cluster_keys.hpp"
#include "transport/zmq_util.hpp"

#include <cstdio>
#include <random>
#include <vector>
#include <zmq_addon.hpp>

namespace supernode::transport::detail {

namespace {

constexpr const char* zap_endpoint = "inproc://zeromq.zap.01";
constexpr const char* zap_domain = "supernode";

std::string hex32(uint32_t value) {
  char text[11];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

} // namespace

std::string connection_routing_id(std::string_view name) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char nonce[17];
  std::snprintf(nonce, sizeof nonce, "%016llx", static_cast<unsigned long long>(random()));
  std::string id(name);
  id += '#';
  id += nonce;
  return id;
}

std::string_view claimed_name(std::string_view routing_id) {
  const auto hash = routing_id.rfind('#');
  return hash == std::string_view::npos ? routing_id : routing_id.substr(0, hash);
}

void make_curve_server(zmq::socket_t& router, const curve_keypair& own) {
  router.set(zmq::sockopt::curve_server, true);
  router.set(zmq::sockopt::curve_secretkey, own.secret_key);
  router.set(zmq::sockopt::zap_domain, zap_domain);
}

void make_curve_client(zmq::socket_t& dealer, const curve_keypair& own,
                       const std::string& server_public) {
  dealer.set(zmq::sockopt::curve_serverkey, server_public);
  dealer.set(zmq::sockopt::curve_publickey, own.public_key);
  dealer.set(zmq::sockopt::curve_secretkey, own.secret_key);
}

std::optional<std::string> proven_sender(const zmq::message_t& part) {
  const char* user = zmq_msg_gets(const_cast<zmq_msg_t*>(part.handle()), "User-Id");
  if (!user || !*user) return std::nullopt;
  return std::string(user);
}

zap_handler::zap_handler(
    zmq::context_t& context, std::shared_ptr<const cluster_keys> keys,
    std::function<void(const std::string& address, const std::string& why)> on_denied)
    : keys_(std::move(keys)), on_denied_(std::move(on_denied)),
      socket_(context, zmq::socket_type::rep) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind(zap_endpoint);
}

void zap_handler::serve() {
  std::vector<zmq::message_t> request;
  for (;;) {
    request.clear();
    if (!zmq::recv_multipart(socket_, std::back_inserter(request), zmq::recv_flags::dontwait))
      return;
    // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
    std::string status = "400", text, user;
    const std::string address = request.size() > 3 ? request[3].to_string() : "";
    if (request.size() < 7 || request[0].to_string() != "1.0") {
      text = "malformed ZAP request";
    } else if (request[5].to_string() != "CURVE") {
      text = "mechanism " + request[5].to_string() + " is not CURVE";
    } else if (auto key = z85_of_binary_key(request[6].to_string()); !key) {
      text = "malformed client key";
    } else if (auto owner = keys_->owner_of(*key)) {
      status = "200", text = "OK", user = *owner;
    } else {
      text = "key " + *key + " belongs to no instance in " + keys_->dir().string();
    }
    if (status != "200") on_denied_(printable(address), text);
    std::vector<zmq::message_t> reply;
    reply.emplace_back(std::string_view("1.0"));
    reply.push_back(request.size() > 1 ? std::move(request[1]) : zmq::message_t());
    reply.emplace_back(std::string_view(status));
    reply.emplace_back(std::string_view(text));
    reply.emplace_back(std::string_view(user));
    reply.emplace_back(); // no metadata
    zmq::send_multipart(socket_, reply);
  }
}

handshake_watch::handshake_watch(zmq::context_t& context, zmq::socket_t& router)
    : router_(router.handle()), monitor_(context, zmq::socket_type::pair) {
  const std::string address = "inproc://supernode-handshakes-" + std::to_string(uintptr_t(this));
  if (zmq_socket_monitor(router_, address.c_str(), handshake_failure_events) != 0)
    throw zmq::error_t();
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(address);
}

void handshake_watch::drain(
    const std::function<void(const std::string& address, const std::string& why)>& on_refused) {
  monitor_event e;
  while (read_monitor_event(monitor_, e))
    if (auto why = handshake_failure(e.id, e.value)) on_refused(e.address, *why);
}

void handshake_watch::close() {
  zmq_socket_monitor(router_, nullptr, 0);
  monitor_.close();
}

std::optional<std::string> handshake_failure(uint16_t event, uint32_t value) {
  switch (event) {
  case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
    return "the connection ended during the handshake (" + std::string(zmq_strerror(int(value))) +
           ")";
  case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
    return "ZAP refused the key (status " + std::to_string(value) + ")";
  case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
    switch (value) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return std::string("the other side does not speak CURVE (mechanism mismatch)");
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
      return std::string("the handshake does not decrypt (a key the other side does not expect)");
    default:
      return "protocol error " + hex32(value);
    }
  default:
    return std::nullopt;
  }
}

} // namespace supernode::transport::detail
