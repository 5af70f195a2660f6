#pragma once
// The MP SDK over the cluster's planes (§4.4.1): keys are routed to MP servers by a copy of the
// controller's ring (fetched on first use, replaced whenever the controller pushes a new one),
// each server gets one batch request per call, and the calls to different servers run at once.
// Reads go over UB when the config says so and the server's region can be mapped (the reply
// says where each block lies; the client copies it out and verifies its checksum, and a block
// the server moved meanwhile is fetched again by value) and over VPC otherwise (bytes in the
// reply). Once the ring has changed under the client, a key missing at its owner is looked for
// at the server after it too (where it lived before a server joined). With [ems] replicas = 2
// every put also goes, without waiting, to that second server, every remove to both, and a key
// its owner misses or cannot serve (down, unreachable) is read from the second server. Every
// failure — no controller, server down, timeout, bad reply — is a miss or a failed put with the
// reason, never an exception out of the data calls and never wrong bytes. Thread-safe; replies
// complete on plane threads, so calls may block any other thread.

#include "services/ems/ems_config.hpp"
#include "services/ems/hash_ring.hpp"
#include "services/ems/pool_client.hpp"
#include "transport/endpoint.hpp"
#include "transport/shm_region.hpp"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>

namespace supernode::services::protocol {
struct ems_ring_view;
}

namespace supernode::services::ems {

struct ems_client_stats {
  uint64_t ub_reads = 0, ub_bytes = 0;   // blocks copied out of a server's mapped region
  uint64_t vpc_reads = 0, vpc_bytes = 0; // blocks that came as bytes in a reply
  uint64_t ub_retries = 0;               // region copies that failed their checksum
  uint64_t failed_calls = 0;             // requests that ended without a reply
};

class ems_client : public pool_client {
public:
  // `out` is started and outlives the client. Contacts nobody until the first call.
  ems_client(transport::endpoint& out, const ems_config& config);
  ~ems_client() override;

  // A ring view the controller pushed (the owning role passes every one it receives).
  void on_ring_view(const protocol::ems_ring_view& view);
  // False when the cluster has no MP controller: every call then misses.
  bool configured() const { return !controller_.empty(); }
  // Asks the controller for its ring now (and so subscribes to its pushes); false when it
  // cannot be reached.
  bool refresh_ring();
  // Until `ready` holds for the servers on the ring (asked of the controller first, then as
  // pushes arrive); false on timeout.
  bool wait_for_ring(const std::function<bool(const std::vector<std::string>& servers)>& ready,
                     std::chrono::milliseconds timeout);
  // Until the ring has at least one server (a pool that is still starting).
  bool wait_for_servers(std::chrono::milliseconds timeout);
  uint64_t ring_version() const;
  std::vector<std::string> servers() const;
  ems_client_stats stats() const;

  std::vector<pool_put_outcome> put(const std::string& ns,
                                    std::span<const pool_put> items) override;
  pool_get_outcome get(const std::string& ns, std::span<const std::string> keys) override;
  std::vector<bool> exists(const std::string& ns, std::span<const std::string> keys) override;
  size_t remove(const std::string& ns, std::span<const std::string> keys) override;
  std::vector<std::string> list(const std::string& ns) override;
  model_claim claim_model(const std::string& model_key) override;
  void register_model(const std::string& model_key, const std::string& ns,
                      std::span<const std::byte> manifest, std::span<const std::string> block_keys,
                      uint64_t bytes, const std::string& failed) override;

  // A put nobody waits for: the bytes are copied into the requests before this returns, and
  // `done(stored, failed, first_error)` runs once every server answered (on a plane thread).
  using put_done = std::function<void(size_t stored, size_t failed, const std::string& error)>;
  void put_async(const std::string& ns, std::span<const pool_put> items, put_done done);

private:
  struct call_result {
    std::optional<transport::envelope> reply;
    std::string error;
  };
  using reply_fn = std::function<void(call_result)>;
  // Sends the puts (one message per server and 16 MiB) and hands every key's outcome to `done`
  // once all servers answered, failed or timed out: what put and put_async share.
  void put_outcomes(const std::string& ns, std::span<const pool_put> items,
                    std::function<void(std::vector<pool_put_outcome>)> done);
  // Sends what `make(request_id)` builds to `peer` and calls `done` exactly once.
  void call(const std::string& peer, const std::function<transport::envelope(uint64_t)>& make,
            reply_fn done);
  std::future<call_result> call(const std::string& peer,
                                const std::function<transport::envelope(uint64_t)>& make);
  call_result wait(std::future<call_result>& f);
  // The current ring, asked of the controller when there is none yet; nullptr when unreachable.
  std::shared_ptr<const hash_ring> ring();
  // Keys grouped by owning server: server -> indices into `keys`.
  std::map<std::string, std::vector<size_t>> route(const hash_ring& ring, const std::string& ns,
                                                   std::span<const std::string> keys) const;
  // Keys at `at` grouped by the server after their owner on the ring: where the second copy
  // lives with replicas = 2, and where a key lives when the server that now owns it joined after
  // it was stored. Empty on a ring of one server.
  bool ring_moved() const;
  std::map<std::string, std::vector<size_t>>
  route_to_second_owner(const hash_ring& ring, const std::string& ns,
                        std::span<const std::string> keys, const std::vector<size_t>& at) const;
  // Whether a key its owner did not give is worth asking of the second owner: it holds a copy
  // (replicas = 2) or the key's previous owner (the ring changed under this client).
  bool ask_second_owner() const { return config_.replicas > 1 || ring_moved(); }
  // One get per server of `groups`, results into `out`; keys the servers did not have go to
  // `missed`, keys whose server did not answer to `unanswered`. Region copies that fail their
  // checksum are fetched again by value.
  void get_round(const std::string& ns, std::span<const std::string> keys,
                 const std::map<std::string, std::vector<size_t>>& groups, bool allow_reference,
                 pool_get_outcome& out, std::vector<size_t>& missed,
                 std::vector<size_t>& unanswered);
  // The keys the first round did not give that the second owner may have: misses, and with
  // replicas also the keys of servers that did not answer (down, unreachable).
  std::vector<size_t> second_round_keys(std::vector<size_t> missed,
                                        const std::vector<size_t>& unanswered) const;
  std::shared_ptr<transport::shm_region> region_of(const std::string& server,
                                                   const std::string& name);
  void forget_region(const std::string& server);
  void mark_unmappable(const std::string& server);

  transport::endpoint& out_;
  ems_config config_;
  std::string controller_;
  std::chrono::milliseconds timeout_;

  mutable std::mutex mutex_;
  std::condition_variable ring_changed_;
  std::shared_ptr<const hash_ring> ring_;
  uint64_t ring_version_ = 0;
  bool ring_moved_ = false; // the servers on the ring changed since the first view
  std::map<std::string, std::shared_ptr<transport::shm_region>> regions_; // by server
  // Servers whose region this host could not map, until when: read by value meanwhile, then
  // mapped again (a server that was restarting when we tried is on this host after all).
  std::map<std::string, std::chrono::steady_clock::time_point> unmappable_until_;
  bool unmappable_locked(const std::string& server) const;
  ems_client_stats stats_;
};

} // namespace supernode::services::ems
