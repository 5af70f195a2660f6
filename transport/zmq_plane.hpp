#pragma once
// The zmq plane: ZeroMQ over ipc or tcp between processes, standing in for the VPC plane
// (control messages) and the RDMA plane (bulk KV transfers). Two paths, each with its own zmq
// context, I/O thread and sockets, so a 64 MiB transfer never sits in front of a ping: frames
// up to bulk_threshold bytes take the control path, larger ones the bulk path. Each plane binds
// a ROUTER per path; connect() opens a DEALER per path toward the peer, identified by our id.
// Order is kept per path, not across paths: a small message may overtake a large one.
//
// Copies: a frame whose message has large shared_bytes bodies (bulk_chunk data) goes as a
// multipart zmq message — head, body, head, ... — every part sent zero-copy from where it is, the
// message kept alive until zmq has written the last part. The receiver judges the parts as one
// frame (decode_frame over parts: total length against the header and the type's limit, each
// body right after a bin32 header of its size) and the decoded message references the received
// zmq messages. So a payload is copied only by the kernel socket path — without CURVE: with it,
// libzmq copies each message into its box and out of it on the I/O threads (docs/benchmarks.md).
//
// Trust: with keys (what plane_factory always passes), both paths run CurveZMQ (zmq_curve.hpp):
// a peer connects only with the key of an instance of the cluster, and a message is delivered
// as from that instance only when it also claims to be it (its routing id); one claiming another
// name is dropped and counted (identity_mismatch), a refused handshake counted too
// (handshakes_refused). Without keys (the plane's unit tests, the benchmark's off-case) anyone
// who can reach the sockets is believed.
//
// Handlers run on the paths' receive threads, so control and bulk messages can be delivered
// concurrently; the disconnect handler runs on a send thread and must not call stop().

#include "transport/plane.hpp"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

namespace zmq {
class message_t;
}

namespace supernode::transport {

class cluster_keys;

namespace detail {
class zmq_path;
struct peer_link;
} // namespace detail

struct zmq_plane_options {
  peer_id self;
  // CURVE with self's key pair, peers' public keys from here; null: no security (tests only).
  std::shared_ptr<const cluster_keys> keys;
  // ipc://path or tcp://host:port; tcp://127.0.0.1:* picks a free port (see control_endpoint()).
  std::string control_endpoint = "tcp://127.0.0.1:*";
  std::string bulk_endpoint = "tcp://127.0.0.1:*";
  // Per peer, messages (and bytes) accepted by send() but not yet written to the socket; past
  // either bound send() answers queue_full. One message larger than the byte bound still goes
  // when nothing else is queued.
  size_t queue_limit = 4096;
  size_t queue_bytes_limit = size_t{256} << 20;
  // Encoded frames longer than this take the bulk path.
  size_t bulk_threshold = size_t{64} << 10;
  // Bulk messages a receiver buffers per peer before the sender feels it (memory bound).
  int bulk_receive_hwm = 32;
  // zmq refuses, and drops the connection of, anything larger: it cannot be received without
  // allocating it first. Everything below reaches decode_frame and is judged there.
  int64_t max_message_bytes = int64_t{128} << 20;
  // The plane carrying heartbeats (the control flow): how often its control path's receive
  // thread at least stamps that it has read everything (read_up_to). Zero for other planes:
  // no stamp, read_up_to answers `now`, and the thread sleeps until input.
  std::chrono::milliseconds read_stamp_interval{0};
  // How long the control path's connection to a peer may hear nothing (zmq PING/PONG) before
  // it is dropped and reported. make_plane puts it well past the cluster's liveness bound: a
  // hung peer must be declared down for its silence, and fenced, while its connection still
  // looks up. Dropped first, it would only be down, unfenced, and taken back when it woke.
  std::chrono::milliseconds link_timeout{3000};
};

class zmq_plane : public plane {
public:
  // Binds both endpoints (throws zmq::error_t when one is taken or malformed).
  explicit zmq_plane(zmq_plane_options options);
  ~zmq_plane() override;

  std::string_view kind() const override { return "zmq"; }
  send_status send(const peer_id& to, const envelope& message) override;
  void set_handler(message_handler handler) override;
  void start() override;
  void stop() override;
  void add_peer(const peer_id& peer, const std::string& control_address,
                const std::string& bulk_address) override {
    connect(peer, control_address, bulk_address);
  }
  std::string bound_address(const std::string& channel) const override {
    return channel == "bulk" ? bulk_endpoint() : control_endpoint();
  }
  bool link_down(const peer_id& peer) const override;
  steady_time read_up_to(steady_time now) const override;

  // Makes `peer` reachable; connecting again replaces the old connection (a restarted peer).
  // Secured, a peer without a public key in the key folder stays unreachable (sends answer
  // unknown_peer) and a line says why.
  void connect(const peer_id& peer, const std::string& control_endpoint,
               const std::string& bulk_endpoint);
  // Forgets the peer: queued messages are dropped and sends answer unknown_peer.
  void disconnect(const peer_id& peer);
  // The addresses actually bound, to announce to peers.
  std::string control_endpoint() const;
  std::string bulk_endpoint() const;

  using plane::set_disconnect_handler;
  void set_disconnect_handler(std::function<void(const peer_id&)> handler);

  const zmq_plane_options& options() const { return options_; }

private:
  void on_message(const char* path, const std::string& routing_id, std::span<zmq::message_t> parts);
  // Whether a received message is from the instance its routing id claims; counts and logs it
  // when not.
  bool sender_proven(const char* path, std::string_view claimed, const zmq::message_t& first);
  void on_link(int path, const std::shared_ptr<detail::peer_link>& link, bool connected,
               const std::string& where);
  std::shared_ptr<const message_handler> wait_for_handler();

  zmq_plane_options options_;
  std::unique_ptr<detail::zmq_path> control_, bulk_;
  mutable std::mutex mutex_; // guards everything below
  std::condition_variable handler_set_;
  std::map<peer_id, std::shared_ptr<detail::peer_link>> peers_;
  std::shared_ptr<const message_handler> handler_;
  bool stopped_ = false;
};

} // namespace supernode::transport
