#pragma once
// The reference engine on a serving benchmark's workload, in the benchmark's own process: what
// the server's throughput is compared with to measure what serving costs (HTTP, tokenization,
// scheduling, messages, streaming). Requests run in batches of `concurrency` through
// generate_batch, the steady state of a server holding that many requests.

#include "model/engine.hpp"
#include "services/loadgen/workload.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

namespace supernode::apps {

// Requests first .. first + count - 1 of a workload as the reference engine takes them (greedy,
// ignore_eos, as the load generator asks the server).
std::vector<model::generation_request>
engine_requests(const std::vector<services::loadgen::planned_request>& plan, size_t first,
                size_t count);

// {"model", "concurrency", "requests", "output_tokens", "duration_s", "output_throughput"}
nlohmann::json run_engine_baseline(const std::filesystem::path& model_dir,
                                   const std::vector<services::loadgen::planned_request>& plan,
                                   int64_t concurrency);

} // namespace supernode::apps
