#pragma once
// The [ems] table: how MP servers size their tiers, how clients reach the pool, and the two
// caches built on it. Read by serving_config, so every process of a cluster agrees. Every key,
// with its type, default and range: ems_config_table(), docs/configuration.md.
//
//   [ems]  dram_bytes = 268435456   dram_high_watermark = 0.9   ssd_bytes = 4294967296
//          data_dir = ""            # default <run_dir>/ems/<instance>
//          huge_pages = true        read_path = "ub"   # "ub": copy out of the server's mapped
//                                                      # DRAM; "vpc": bytes in the reply
//          vnodes = 64   timeout_ms = 5000   replicas = 1   # 2: every block on two servers
//          handover_timeout_ms = 30000   # a ring change waits this long for the hand-over
//          context_cache = false   block_tokens = 16   context_namespace = "context"
//          store_decode_kv = "off"   # "on_finish" | "incremental" (true, false: on_finish, off)
//          model_cache = false     object_store = ""   object_store_bandwidth = 2.5e9
//          model_namespace = "models"   model_block_bytes = 4194304
//   [ems.quotas]  context = 1073741824   # bytes per namespace over the whole pool

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace supernode::transport {
template<class Config>
class config_table;
} // namespace supernode::transport

namespace supernode::services::ems {

// What a decode instance puts in the pool of the KV its decode arithmetic made (keyed apart from
// prompt prefixes, so no prefill ever loads it): nothing; a sequence's full blocks when it
// leaves the batch; or each block as soon as it is full, so a request resumed elsewhere after
// this instance died loads its generated span instead of recomputing it.
enum class decode_kv_store : uint8_t { off, on_finish, incremental };

struct ems_config {
  // MP server tiers.
  uint64_t dram_bytes = 256ull << 20;
  double dram_high_watermark = 0.9;
  uint64_t ssd_bytes = 4ull << 30;
  std::filesystem::path data_dir; // empty: <run_dir>/ems/<instance>
  bool huge_pages = true;

  // Clients.
  bool read_over_ub = true;
  int32_t vnodes = 64;
  int64_t timeout_ms = 5000;
  // Copies of every block: 2 puts each block on the first two distinct servers of its key on the
  // ring, so a read survives one server's outage. Quotas count every copy (see ems_config_table).
  int32_t replicas = 1;
  std::vector<std::pair<std::string, uint64_t>> quotas;
  // How long the controller waits for the servers to hand over the blocks a ring change moves
  // before it publishes the new ring anyway (what was not handed over is lost to the cache).
  int64_t handover_timeout_ms = 30000;

  // Context cache (prefill).
  bool context_cache = false;
  int64_t block_tokens = 16; // a multiple of [kv] block_size
  std::string context_namespace = "context";
  decode_kv_store store_decode_kv = decode_kv_store::off;

  // Model cache.
  bool model_cache = false;
  std::filesystem::path object_store; // folder holding model folders ("buckets")
  double object_store_bandwidth = 2.5e9;
  std::string model_namespace = "models";
  uint64_t model_block_bytes = 4ull << 20;
};

// The keys of [ems]. [ems.quotas] and the rules that involve other tables (block_tokens a
// multiple of [kv] block_size) are serving_config's.
const transport::config_table<ems_config>& ems_config_table();

} // namespace supernode::services::ems
