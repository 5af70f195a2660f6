#pragma once
// One path of the zmq plane (control or bulk): its own zmq context and I/O thread, a ROUTER
// bound for incoming frames and one DEALER per connected peer for outgoing ones. Each socket
// belongs to exactly one thread: the receive thread owns the ROUTER, its handshake monitor and
// the context's ZAP handler (zmq_curve.hpp), the send thread owns the DEALERs and their monitors.
// Other threads talk to the send thread through a command queue and an eventfd, which zmq::poll
// watches next to the sockets.

#include "transport/cluster_keys.hpp"
#include "transport/message.hpp"
#include "transport/zmq_curve.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

namespace supernode::transport::detail {

// What both paths share about one connected peer. Messages count as queued from send() until
// zmq has written them to the kernel (the zero-copy free function runs), so the bound covers
// our queue and zmq's pipe alike and a peer that stops reading pushes back on the sender.
struct peer_link {
  explicit peer_link(std::string peer, std::string curve_server_key = {})
      : id(std::move(peer)), server_key(std::move(curve_server_key)) {}
  const std::string id;
  const std::string server_key; // the peer's CURVE public key (Z85) when the path is secured
  std::atomic<size_t> queued_messages{0}, queued_bytes{0};
  std::atomic<bool> down{false};
  std::atomic<bool> connected[2]{false, false}; // per path, from the socket monitors

  // Admits one more message unless a bound is hit; a single message larger than the byte
  // bound is admitted when nothing else is queued, or it could never be sent.
  bool reserve(size_t bytes, size_t max_messages, size_t max_bytes);
  void release(size_t bytes);
};

struct path_settings {
  std::string name;          // "control" or "bulk", for logs
  int index = 0;             // into peer_link::connected
  std::string self;          // the identity our DEALERs claim (routing id self#nonce)
  std::string bind_endpoint; // ipc://..., tcp://host:port or tcp://host:*
  int receive_hwm = 1000;    // messages the ROUTER buffers per peer before pushing back
  int64_t max_message_bytes = -1;
  // Non-zero: zmq-level PING/PONG on the DEALERs, which drop a connection that heard nothing
  // for this long, so a silent tcp peer is noticed too. Zero: no PINGs.
  std::chrono::milliseconds heartbeat_timeout{0};
  // How often the receive thread at least stamps that it has read everything (read_up_to);
  // zero: it keeps no stamp and sleeps until input comes.
  std::chrono::milliseconds read_stamp_interval{0};
  // CURVE: with keys, the ROUTER is a server holding `own` and the context's ZAP handler names
  // each client by its key; DEALERs are clients of their link's server_key. Null: no security.
  std::shared_ptr<const cluster_keys> keys;
  curve_keypair own;
};

struct path_callbacks {
  // Receive thread: one message that arrived on the ROUTER, parts after the routing id. The
  // callback may move the parts out (to keep their bytes alive in a decoded message).
  std::function<void(const std::string& from, std::span<zmq::message_t> parts)> on_message;
  // Send thread: a DEALER's connection came up or dropped.
  std::function<void(const std::shared_ptr<peer_link>&, bool connected, const std::string& where)>
      on_link;
  // Send thread: connecting to or sending to `peer` failed (`what` says how); nothing to undo.
  // Receive thread: the ZAP handler refused a client key (`peer` is the client's address).
  std::function<void(const std::string& peer, const std::string& what)> on_trouble;
  // Receive thread: the ROUTER refused one handshake from `where` (no CURVE, unknown key, ...).
  std::function<void(const std::string& where, const std::string& why)> on_handshake_refused;
};

class zmq_path {
public:
  // Binds at once, so the endpoint can be announced before start(); throws zmq::error_t when
  // the address is taken or malformed.
  zmq_path(path_settings settings, path_callbacks callbacks);
  ~zmq_path();
  zmq_path(const zmq_path&) = delete;
  zmq_path& operator=(const zmq_path&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  // The time up to which the receive thread has read what peers sent: the last moment it found
  // nothing left to read. It looks at least every read_stamp_interval, so this lags `now` by
  // that much when all is read, and by more when the thread works through a backlog or does not
  // get to run. `now` when the path keeps no stamp (read_stamp_interval zero). Any thread.
  std::chrono::steady_clock::time_point read_up_to(std::chrono::steady_clock::time_point now) const;
  void start();
  // Joins both threads, closes every socket with linger 0, removes the ipc file we bound.
  void stop();

  // Queued in order with sends, so a send after connect() always finds its socket.
  void connect(std::shared_ptr<peer_link> link, const std::string& endpoint);
  void disconnect(std::shared_ptr<peer_link> link);
  // The link must already hold a reservation for frame.size() bytes. A frame with splices goes
  // as a multipart message, one part per piece, each sent from where it is (zero-copy).
  void send(std::shared_ptr<peer_link> link, encoded_frame frame);

private:
  enum class op : uint8_t { connect, disconnect, send };
  struct command {
    op kind;
    std::shared_ptr<peer_link> link;
    std::string endpoint;
    encoded_frame frame;
  };
  // The parts of one frame; `next` is the first not yet accepted by zmq.
  struct outgoing {
    std::vector<zmq::message_t> parts;
    size_t next = 0;
  };
  struct dealer {
    std::shared_ptr<peer_link> link;
    zmq::socket_t socket, monitor;
    std::deque<outgoing> pending; // only when zmq refused a send (it should not: no HWM)
  };

  void push(command c);
  void name_thread(const char* role);
  void run_sender();
  void run_receiver();
  void execute(command& c);
  void open_dealer(const std::shared_ptr<peer_link>& link, const std::string& endpoint);
  void drain_monitor(dealer& d);
  void flush(dealer& d);

  path_settings settings_;
  path_callbacks callbacks_;
  zmq::context_t context_;
  std::unique_ptr<zap_handler> zap_; // with keys; bound before the ROUTER
  zmq::socket_t router_;
  std::unique_ptr<handshake_watch> handshakes_;
  std::string endpoint_, ipc_file_;
  std::atomic<bool> stopping_{false};
  bool started_ = false, stopped_ = false;
  // When the receive thread last found the ROUTER empty (steady_clock ticks; 0: not yet).
  std::atomic<std::chrono::steady_clock::rep> receiver_caught_up_{0};

  std::mutex mutex_; // guards commands_
  std::deque<command> commands_;
  int command_fd_ = -1, receiver_fd_ = -1; // eventfds: wake the send / receive thread

  std::unordered_map<peer_link*, dealer> dealers_; // send thread only
  uint64_t monitors_opened_ = 0;
  std::thread sender_, receiver_;
};

} // namespace supernode::transport::detail
