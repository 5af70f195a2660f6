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
  void on(const transport::peer_id& from, std::shared_ptr<const Request> m, transport::endpoint&) {
    enqueue([this, from, m = std::move(m)] { serve(from, *m); });
  }
  void on(const transport::peer_id& from, const protocol::ems_ring_view& m,
          transport::endpoint& out);
  // A controller that (re)joined is asked for its ring at once: its answer starts the report.
  void on_member_event(const transport::membership_event& event, transport::endpoint& out) override;
  void on_tick(transport::endpoint& out) override;

  static constexpr size_t max_reply_bytes = size_t{16} << 20;
  static constexpr int usage_report_ticks = 10; // heartbeats between usage reports

private:
  void enqueue(std::function<void()> task);
  // Storage thread.
  void serve(const transport::peer_id& from, const protocol::ems_put& m);
  void serve(const transport::peer_id& from, const protocol::ems_get& m);
  void serve(const transport::peer_id& from, const protocol::ems_exists& m);
  void serve(const transport::peer_id& from, const protocol::ems_remove& m);
  void serve(const transport::peer_id& from, const protocol::ems_list& m);
  void reply(const transport::peer_id& to, transport::envelope m);
  // Storage thread: what the store holds, with the model manifests when `full`, for the
  // controller incarnation `incarnation`.
  protocol::ems_server_report report(uint64_t incarnation, bool full);
  void enqueue_report(bool full);

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

  // Requests for the storage thread, under worker_.mutex().
  std::deque<std::function<void()>> requests_;
  std::mutex stats_mutex_; // the storage thread's current statistics, for the actor's reports
  block_store_stats stats_;
  compute_worker worker_; // last: its thread stops before the members it uses go
};

} // namespace supernode::services::ems
