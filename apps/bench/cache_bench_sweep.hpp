#pragma once
// `bench cache`'s scenario: one cluster per EMS read path, and on it one point per reuse rate
// (a warm-up request that puts a prefix into the pool, then prompts that share it).

#include "services/loadgen/report.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace supernode::apps {

struct cache_bench_options {
  std::filesystem::path model;
  std::filesystem::path base_config;
  std::vector<std::string> paths;
  std::vector<double> rates;
  int64_t prompt_len = 1024;
  int64_t num_prompts = 16;
  int64_t concurrency = 4;
  int64_t block_tokens = 128;
  uint64_t seed = 0;
  double timeout_s = 600;
  std::string svg = "cache_bench.svg";
  std::optional<std::string> json;
  bool quick = false;
};

struct rate_point {
  double rate = 0;
  int64_t shared_tokens = 0;       // round(rate * len): the prefix every prompt shares
  int64_t expected_hit_tokens = 0; // the whole cache blocks of it a lookup can load
  int64_t completed = 0, failed = 0;
  std::string first_failure;
  int64_t prompt_tokens = 0; // of completed requests
  double duration_s = 0;
  double throughput = 0; // prompt tokens / s
  services::loadgen::latency_summary ttft;
  std::optional<double> measured_reuse;
  // What the prefill instance spent looking up and loading KV from the pool, per looked-up
  // prompt, and the rate of the bytes it loaded: the read path's own cost.
  double load_ms_per_prompt = 0, loaded_mb_per_prompt = 0, load_gb_per_s = 0;
  bool warm = true; // the prefix's blocks were seen stored before the measured run
};

// The sweep over every rate on a cluster whose pool is read over `path` ("ub" or "vpc"), the
// `path_no`-th of the run; prompts use token ids below `token_end`. The cluster is up only
// for the sweep.
std::vector<rate_point> run_path(const cache_bench_options& o, const std::string& base_text,
                                 const std::string& path, int path_no, int32_t token_end);

} // namespace supernode::apps
