#pragma once
// A group of ranks that write into each other's registered memory one-sidedly — the UB plane's
// load/store model that FusedDispatch and FusedCombine are built on (§4.2.1). Every rank
// registers a region of the same shape (data bytes plus 64-bit flags); any rank may copy bytes
// into any region (its own included) and add to its flags; a rank reads and waits only on its
// own region. An add() to a rank is ordered after every earlier write() to that rank (release),
// and a wait() that sees the flag's new value sees those writes (acquire): flags are never
// observed before their data.
//
// Two fabrics implement it: shared memory (ranks on one host map each other's regions; a write
// is a memcpy) and ZeroMQ (ranks anywhere; writes travel as messages that the receiver's I/O
// thread applies to its region before bumping the flag). The protocol above them is the same.

#include "log/log.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace supernode::transport {

class cluster_keys;

class rank_fabric {
public:
  virtual ~rank_fabric() = default;

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  size_t bytes() const { return bytes_; }
  size_t flags() const { return flags_; }

  // Blocks until every peer's region is reachable. False when `give_up` turns true or the
  // timeout passes first; `why` then says which ranks are missing.
  virtual bool connect(std::chrono::milliseconds timeout, const std::function<bool()>& give_up,
                       std::string& why) = 0;
  // This rank's region: `bytes()` bytes, written by peers, read here after a wait().
  virtual std::byte* local() = 0;
  // Copies into rank `to`'s region at `offset`; throws std::out_of_range outside the region.
  virtual void write(int to, size_t offset, std::span<const std::byte> data) = 0;
  // Adds `delta` to flag `flag` of rank `to`, after every earlier write to `to`.
  virtual void add(int to, size_t flag, uint64_t delta) = 0;
  virtual uint64_t load(size_t flag) const = 0;
  // Until this rank's flag `flag` >= `at_least`: spins briefly, then sleeps. False on timeout.
  virtual bool wait(size_t flag, uint64_t at_least, std::chrono::nanoseconds timeout) = 0;
  // Why some peer can no longer take part ("rank 2 (pid 77) is gone"), or empty.
  virtual std::string peer_failure() const = 0;
  // Tells the peers this rank is leaving (their peer_failure() names it). Idempotent.
  virtual void leave() = 0;
  // Bytes this rank wrote into peers' regions (its own excluded), for bandwidth figures.
  uint64_t bytes_sent() const { return bytes_sent_; }
  // ZeroMQ with keys: handshakes refused and messages dropped because their connection proved
  // another instance than the rank they name (nobody else can make them). Any thread.
  uint64_t trust_rejections() const { return trust_rejections_.load(); }
  // ZeroMQ: messages dropped because they named a rank but did not come on the connection that
  // rank introduced itself on (an earlier fabric of that rank, reconnected). Any thread.
  uint64_t stale_messages() const { return stale_messages_.load(); }
  // Who the group's lines name: the rank's instance (rank_fabric_options::log).
  const log::logger& log() const { return log_; }

protected:
  rank_fabric(int rank, int ranks, size_t bytes, size_t flags, log::logger log);
  void check_peer(int to) const;
  void check_flag(size_t flag) const; // std::out_of_range past flags()
  int rank_, ranks_;
  size_t bytes_, flags_;
  uint64_t bytes_sent_ = 0;
  std::atomic<uint64_t> trust_rejections_{0};
  std::atomic<uint64_t> stale_messages_{0};
  log::logger log_;
};

struct rank_fabric_options {
  std::string cluster; // shm names: /supernode.<cluster>.region.<group>-rank<r>
  std::string group;   // [A-Za-z0-9_-]
  int rank = 0;
  int ranks = 1;
  size_t bytes = 0;
  size_t flags = 0;
  // ZeroMQ: one address per rank ("ipc:///run/dir/g-0.sock", "tcp://10.0.0.2:7000"); rank r
  // binds addresses[r] and connects to the others.
  std::vector<std::string> addresses;
  log::logger log; // the rank's instance and incarnation, for the fabric's and the group's lines
  // ZeroMQ trust: with keys, every connection is CurveZMQ (zmq_curve.hpp) and a message counts
  // as from rank r only when its connection proved the key of instances[r] (the instance names
  // by rank; this rank's own key pair is that of instances[rank]). Null: no security (ranks as
  // threads of one process, tests).
  std::shared_ptr<const cluster_keys> keys;
  std::vector<std::string> instances;
};

// Registers this rank's region in shared memory (peers on the same host open it by name).
std::unique_ptr<rank_fabric> make_shm_rank_fabric(const rank_fabric_options& options);
// Registers this rank's region in private memory behind a ZeroMQ socket.
std::unique_ptr<rank_fabric> make_zmq_rank_fabric(const rank_fabric_options& options);

} // namespace supernode::transport
