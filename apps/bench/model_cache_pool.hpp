#pragma once
// The EMS pool `bench model-cache` measures: a generated cluster (an MP controller, two MP
// servers and seats for the loader threads), its pool processes started from this binary and
// stopped at the end (also when the bench is interrupted), and a session of the bench's own.

#include "apps/bench/stop_signals.hpp"
#include "services/cluster/process_launcher.hpp"
#include "services/ems/pool_session.hpp"
#include "services/serving/serving_config.hpp"
#include "transport/cluster_config.hpp"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace supernode::apps {

// The generated cluster: planes, the pool's processes and the names the loader threads take.
struct cluster_files {
  std::string name;
  std::filesystem::path run_dir, config_file;
  transport::cluster_config cluster;
  services::ems::ems_config ems;
};

// Writes the cluster under `work` with `loaders` loader seats and the servers' tiers.
cluster_files write_cluster(const std::filesystem::path& work, int loaders, uint64_t dram_bytes,
                            uint64_t ssd_bytes);

// Before timing anything: the controller and both servers answer this session (a short timeout
// per ask, so a server still starting costs a retry, not the full [ems] timeout_ms).
void await_pool_answers(services::ems::pool_session& session, const cluster_files& c);

// MP controller and two MP servers, started and ready, plus one session of the bench's own
// ("the operator") that waits until the ring holds both servers, prefetches and looks.
class pool_cluster {
public:
  // A failure part way stops what started.
  pool_cluster(const cluster_files& c, const std::string& operator_name);
  ~pool_cluster();
  pool_cluster(const pool_cluster&) = delete;
  pool_cluster& operator=(const pool_cluster&) = delete;

  services::ems::ems_client& client() { return session_->client(); }

private:
  void start(const cluster_files& c, const std::string& process, int id);
  void stop_all();

  std::vector<services::cluster::child_process> children_;
  std::unique_ptr<on_stop_signal> stop_on_signal_;
  std::unique_ptr<services::ems::pool_session> session_;
};

} // namespace supernode::apps
