#pragma once
// Sends a planned workload: each request when its arrival time comes and, under a concurrency
// cap, only once a slot is free (vLLM's semantics: rate-limited and concurrency-capped). One io
// thread, the caller's, drives every request in flight.

#include "services/loadgen/http_url.hpp"
#include "services/loadgen/request_outcome.hpp"
#include "services/loadgen/workload.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace supernode::services::loadgen {

struct run_progress {
  int64_t total = 0;
  int64_t done = 0; // completed or failed
  int64_t failed = 0;
  int64_t in_flight = 0;
  int64_t output_tokens = 0; // token events received so far
  double elapsed_s = 0;
};

struct run_options {
  http_url url;
  // More servers for --retry: a request that fails on a connection error is resubmitted to the
  // next of url, more_urls... (wrapping around), up to `retries` times.
  std::vector<http_url> more_urls;
  int64_t retries = 0;
  // Ask for token ids (request_outcome::token_ids).
  bool return_token_ids = false;
  std::string model;
  int64_t max_concurrency = 0; // 0: no cap
  double timeout_s = 600;
  // Called on the io thread once, with the instant every outcome's seconds count from, before
  // the first request is sent (a fault schedule keeps the same clock).
  std::function<void(std::chrono::steady_clock::time_point)> on_start;
  // Called on the io thread every progress_interval_s and once at the end.
  std::function<void(const run_progress&)> on_progress;
  double progress_interval_s = 0.25;
};

struct run_result {
  std::vector<request_outcome> outcomes; // in workload order
  double duration_s = 0;                 // first send to last completion
};

// Never throws for network trouble: an unresolvable host or refused connection fails each
// request with its reason.
run_result run_load(const std::vector<planned_request>& plan, const run_options& options);

} // namespace supernode::services::loadgen
