#pragma once
// The two calls the benchmark makes to an OpenAI-compatible server, over Boost.Beast with C++20
// coroutines so one io thread can drive every request in flight.

#include "services/loadgen/http_url.hpp"
#include "services/loadgen/request_outcome.hpp"
#include "services/loadgen/workload.hpp"

// clang-format off
#include <utility> // before asio: Boost 1.74's awaitable.hpp uses std::exchange
// clang-format on
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdint>
#include <string>

namespace supernode::services::loadgen {

using steady_time = std::chrono::steady_clock::time_point;

struct completion_call {
  const http_url* url = nullptr;
  const boost::asio::ip::tcp::resolver::results_type* endpoints = nullptr;
  std::string model;
  // Seconds are measured from here (the start of the run).
  steady_time origin;
  std::chrono::steady_clock::duration timeout = std::chrono::seconds(600);
  // Bumped for every token event as it arrives, for live progress.
  int64_t* tokens_seen = nullptr;
};

// The JSON body of a streamed, greedy, ignore_eos completion, so every request generates exactly
// max_tokens and runs against different servers compare.
std::string completion_request_body(const std::string& model, const planned_request& request);

// POSTs /v1/completions and reads the event stream into `out`. Never throws: a refused
// connection, a non-200 status, a malformed or truncated stream or the timeout become
// out.ok = false with the reason in out.error.
boost::asio::awaitable<void> stream_completion(const completion_call& call,
                                               const planned_request& request,
                                               request_outcome& out);

struct served_model {
  std::string id;
  int64_t max_model_len = 0; // 0 when the server does not say
};

// GET /v1/models and the first model listed; throws std::runtime_error with the reason.
served_model fetch_served_model(const http_url& url, double timeout_s);

} // namespace supernode::services::loadgen
