#pragma once
// A plane moves messages between named peers (role instances such as "prefill-0"). Planes
// stand in for the supernode's networks: inproc (same process), shm (UB), zmq (RDMA and VPC).
// Which plane carries which flow is chosen in the cluster config, never in the code that sends.

#include "log/log.hpp"
#include "transport/frame.hpp"
#include "transport/message.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace supernode::transport {

using peer_id = std::string;
using steady_time = std::chrono::steady_clock::time_point;

enum class send_status : uint8_t {
  ok = 0,
  queue_full,   // the peer's bounded queue is full: back off and retry, or fail the request
  unknown_peer, // no endpoint for this peer (never joined, or left)
  peer_down,    // the peer is known to be dead
  too_large,    // the encoded message exceeds its type's max_bytes
  closed,       // the plane is shutting down
};
const char* to_string(send_status s);

struct plane_counters {
  std::atomic<uint64_t> messages_sent{0}, messages_received{0};
  std::atomic<uint64_t> bytes_sent{0}, bytes_received{0};
  std::atomic<uint64_t> queue_full{0};
  // Trust: handshakes the plane refused (zmq under CURVE: no CURVE, a key of no instance, a
  // wrong server key), and links or messages dropped because the peer could not prove the
  // identity it claimed (a zmq connection that proved another instance; a shm ring whose MAC
  // does not verify with the claimed sender's key).
  std::atomic<uint64_t> handshakes_refused{0}, identity_mismatch{0};
  frame_error_counters bad_frames;
};

// Called on the plane's receiving thread; must not block for long.
using message_handler = std::function<void(const peer_id& from, envelope message)>;

class plane {
public:
  virtual ~plane() = default;
  // "inproc", "shm" or "zmq".
  virtual std::string_view kind() const = 0;
  // Hands one message to the plane for `to`. Never blocks: a full queue answers queue_full.
  virtual send_status send(const peer_id& to, const envelope& message) = 0;
  // Installs the receiver before start(); messages that arrive earlier wait in the plane.
  virtual void set_handler(message_handler handler) = 0;
  virtual void start() = 0;
  // Stops the receiving thread and releases OS resources (sockets, segments). Idempotent.
  virtual void stop() = 0;
  // Makes `peer` reachable at the addresses it announced (member_join); planes that find peers
  // by name alone (inproc, shm) ignore it.
  virtual void add_peer(const peer_id& peer, const std::string& control_address,
                        const std::string& bulk_address) {
    (void)peer, (void)control_address, (void)bulk_address;
  }
  // The address this plane bound for `channel` ("control" or "bulk"), as peers should be told
  // in member_join; "" for planes that find peers by name (the config's address serves).
  virtual std::string bound_address(const std::string& channel) const {
    (void)channel;
    return {};
  }
  // Called when the plane itself sees a peer go away (its connection dropped, its process
  // died): the fast path of liveness, ahead of missed heartbeats.
  void set_disconnect_handler(std::function<void(const peer_id&, const std::string& reason)> h) {
    on_disconnect_ = std::move(h);
  }
  // True while the plane has reported `peer` disconnected and not seen it connect again. Any
  // thread.
  virtual bool link_down(const peer_id& peer) const {
    (void)peer;
    return false;
  }
  // The time up to which this plane has read the small messages (heartbeats) peers sent it: a
  // receive thread that is behind, or does not get to run, has not seen the heartbeats waiting
  // for it, and their senders are not silent. `now` for planes that do not track it. Any
  // thread.
  virtual steady_time read_up_to(steady_time now) const { return now; }

  const plane_counters& counters() const { return counters_; }
  // Who this plane's log lines name (the endpoint passes its instance and incarnation); until
  // then, the peer name the plane was made for. Call before start(): the plane's threads read it.
  void set_logger(log::logger logger) { log_ = std::move(logger); }

protected:
  plane_counters counters_;
  log::logger log_;
  // For lines a peer can cause at will (bad frames, unusable slots, failing sends): at most one
  // per reason per interval, with a count of the rest.
  log::rate_limiter peer_lines_;
  std::function<void(const peer_id&, const std::string& reason)> on_disconnect_;
};

} // namespace supernode::transport
