#pragma once
// The MP server role (§4.4.1): one block store whose DRAM tier lives in a shared-memory region
// ("/supernode.<cluster>.region.ems.<instance>") that clients on the host map read-only, so a
// get over UB answers with where the block is and the client copies it out itself; over VPC
// the reply carries the bytes. Puts are persisted to the SSD tier before they are acknowledged.
// Requests are served in arrival order on a storage thread of the server's own (the store is not
// thread-safe, and its fsyncs must not hold up the actor thread, which sends the heartbeats that
// keep the server on the ring). A reply carries at most max_reply_bytes of block bytes; blocks
// beyond are answered "ask again" and the client asks for them in another request.
// The server reports what it holds to the controller — in full, with the model manifests it
// stores, to every controller incarnation it meets, and its namespaces' usage every few ticks —
// so a restarted controller rebuilds its ring, usage and model index without any server
// restarting. While the controller is down the server goes on serving.
// When the ring changes (a server joins or leaves) the controller first sends the target ring;
// the storage thread then hands the blocks the change moves to their new owners in the
// background (block_handover), between the requests it serves, and tells the controller when
// they are all there. A draining server asks to leave and is drained() once the controller
// published a ring without it (its blocks handed over), or past its hand-over timeout.

#include "services/ems/block_handover.hpp"
#include "services/ems/block_store.hpp"
#include "services/ems/ems_config.hpp"
#include "services/ems/mp_server_interface.hpp"
#include "services/role_logic.hpp"
#include "services/serving/compute_worker.hpp"
#include "transport/shm_region.hpp"

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace supernode::services::ems {

// Where an MP server keeps its SSD tier: [ems] data_dir, or <run_dir>/ems/<instance>.
std::filesystem::path server_data_dir(const ems_config& config,
                                      const transport::cluster_config& cluster,
                                      const std::string& instance);
// The shared region's name (without the cluster prefix) clients open to read over UB.
std::string server_region_name(const std::string& instance);

class mp_server : public role_logic {
public:
  using interface = mp_server_interface;
  mp_server(const transport::cluster_config& cluster, const std::string& instance,
            const ems_config& config);

  ~mp_server() override;
  void start(transport::endpoint& out) override;
  void stop() override;
  // Requests go to the storage thread whole (its fsyncs and copies never run on the actor's).
  template<class Request>
  requires protocol::is_ems_server_request<Request>
  void on(const transport::peer_id& from, std::shared_ptr<const Request> m,
          transport::endpoint& out) {
    if constexpr (std::is_same_v<Request, protocol::ems_put>) {
      const bool handed_over = out.role_of(from) == "mp_server"; // another server's hand-over
      enqueue([this, from, m = std::move(m), handed_over] { serve(from, *m, handed_over); });
    } else {
      enqueue([this, from, m = std::move(m)] { serve(from, *m); });
    }
  }
  void on(const transport::peer_id& from, const protocol::ems_ring_view& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::ems_ring_target& m,
          transport::endpoint& out);
  // Asks the controller to take this server off the ring once its blocks are handed over.
  void drain(drain_mode mode) override;
  bool drained() const override;
  // A controller that (re)joined is asked for its ring at once: its answer starts the report.
  void on_member_event(const transport::membership_event& event, transport::endpoint& out) override;
  void on_tick(transport::endpoint& out) override;
  // Blocks ring changes moved in and out of this server so far (any thread).
  handover_totals handover_counts();
  // The newest ring view taken (any thread); requests that arrive after it see it.
  uint64_t ring_version() const { return ring_version_; }

  static constexpr size_t max_reply_bytes = size_t{16} << 20;
  static constexpr int usage_report_ticks = 10; // heartbeats between usage reports

private:
  void enqueue(std::function<void()> task);
  // Storage thread.
  void serve(const transport::peer_id& from, const protocol::ems_put& m, bool handed_over);
  void serve(const transport::peer_id& from, const protocol::ems_get& m);
  void serve(const transport::peer_id& from, const protocol::ems_exists& m);
  void serve(const transport::peer_id& from, const protocol::ems_remove& m);
  void serve(const transport::peer_id& from, const protocol::ems_list& m);
  void reply(const transport::peer_id& to, transport::envelope m);
  // Storage thread: what the store holds, with the model manifests when `full`, for the
  // controller incarnation `incarnation`.
  protocol::ems_server_report report(uint64_t incarnation, bool full);
  void enqueue_report(bool full);
  // Storage thread: sends the hand-over's next batches, reports a finished one, and sends the
  // acknowledgements held back while forwarding once nothing is unanswered.
  void pump_handover();
  void release_held_acks();
  void send_handover_done();
  void send_handover_batch(handover_batch batch);

  std::string instance_;
  std::string model_namespace_;
  // The controller incarnation last reported to in full (actor thread), and its instance.
  uint64_t reported_incarnation_ = 0;
  transport::peer_id controller_;
  int ticks_since_report_ = 0;
  transport::endpoint* out_ = nullptr;
  transport::shm_region region_;
  std::unique_ptr<block_store> store_;
  std::atomic<uint64_t> ring_version_{0};
  std::chrono::milliseconds timeout_;          // a hand-over batch's answer
  std::chrono::milliseconds handover_timeout_; // the controller's, bounding a drain
  int32_t copies_;                             // [ems] replicas
  // Drain: asked (any thread), then off the ring as the controller published it (actor thread).
  std::atomic<bool> leaving_{false}, on_ring_{false}, left_{false};
  std::atomic<bool> handover_idle_{true};     // storage thread: nothing queued or unanswered
  std::atomic<int64_t> drain_deadline_ns_{0}; // steady clock
  block_handover handover_;                   // storage thread
  transport::peer_id handover_controller_;    // storage thread: who asked for the hand-over
  // Storage thread. Off the ring, a put from a client with the older ring is acknowledged only
  // once it reached its owner: this process may exit at any moment after it is idle, and an
  // acknowledgement must never name a block that dies with it. On the ring, so is a put of a
  // block whose owner on the newest ring is another server (it crossed the publish): here it
  // is a stale copy no later change would move.
  bool forwarding_ = false;
  struct held_ack {
    transport::peer_id to;
    protocol::ems_put_reply reply;
    uint64_t failed_before; // the hand-over's failed blocks when it was held
  };
  std::vector<held_ack> held_acks_;

  // Requests for the storage thread, under worker_.mutex().
  std::deque<std::function<void()>> requests_;
  std::mutex stats_mutex_; // the storage thread's current statistics, for the actor's reports
  block_store_stats stats_;
  handover_totals handover_totals_;
  compute_worker worker_; // last: its thread stops before the members it uses go
};

} // namespace supernode::services::ems
