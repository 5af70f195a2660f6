#pragma once
// The MP server role (§4.4.1): one block store whose DRAM tier lives in a shared-memory region
// ("/supernode.<cluster>.region.ems.<instance>") that clients on the host map read-only, so a
// get over UB answers with where the block is and the client copies it out itself; over VPC
// the reply carries the bytes. Puts are persisted to the SSD tier before they are acknowledged.
// Runs on its actor's thread, one message at a time (the store is not thread-safe).

#include "services/ems/block_store.hpp"
#include "services/ems/ems_config.hpp"
#include "services/role_logic.hpp"
#include "transport/shm_region.hpp"

#include <memory>
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
  mp_server(const transport::cluster_config& cluster, const std::string& instance,
            const ems_config& config);

  void on_message(const transport::peer_id& from, const transport::envelope& message,
                  transport::endpoint& out) override;
  void on_tick(transport::endpoint& out) override;

  const block_store& store() const { return *store_; }

private:
  void reply(transport::endpoint& out, const transport::peer_id& to, transport::envelope m);

  std::string instance_;
  transport::shm_region region_;
  std::unique_ptr<block_store> store_;
  uint64_t ring_version_ = 0;
};

} // namespace supernode::services::ems
