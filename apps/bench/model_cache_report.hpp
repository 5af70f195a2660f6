#pragma once
// `bench model-cache`'s report: one JSON object on stdout (and in --json FILE) and Table 2's
// rows on stderr, from what the scenarios measured.

#include "apps/bench/model_cache_loaders.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace supernode::apps {

// What the run was: the model, the bucket's cap, the instances and the pool's tiers.
struct model_cache_setup {
  std::filesystem::path model_dir;
  std::string id;
  size_t files = 0;
  uint64_t model_bytes = 0;
  double bandwidth = 0;
  int instances = 0;
  uint64_t dram_bytes = 0, ssd_bytes = 0;
  std::filesystem::path bucket;
};

// What the scenarios measured.
struct model_cache_results {
  summary no_cache, switch_no_cache, ems_cold, ems_warm, switch_ems;
  double local_warm_s = 0; // the local-DRAM warm start: a copy of the node's own copy
  double prefetch_b_s = 0; // bucket -> pool, model B, before the switch
  uint64_t pool_bytes_a = 0, pool_bytes_ab = 0;
  bool pool_complete_a = false, pool_holds_both = false;
};

void report_model_cache(const model_cache_setup& setup, const model_cache_results& r,
                        const std::optional<std::string>& json_file);

} // namespace supernode::apps
