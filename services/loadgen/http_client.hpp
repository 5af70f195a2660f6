#pragma once
// HTTP over Boost.Beast: the streamed completions the serving benchmark sends (C++20 coroutines,
// so one io thread drives every request in flight), and one blocking request at a time for
// everything else (a model list, /metrics, the tests' calls).

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
  // Ask for each chunk's token ids (vLLM's return_token_ids), into request_outcome::token_ids.
  bool return_token_ids = false;
};

// The JSON body of a streamed, greedy, ignore_eos completion, so every request generates exactly
// max_tokens and runs against different servers compare.
std::string completion_request_body(const std::string& model, const planned_request& request,
                                    bool return_token_ids = false);

// POSTs /v1/completions and reads the event stream into `out`. Never throws: a refused
// connection, a non-200 status, a malformed or truncated stream or the timeout become
// out.ok = false with the reason in out.error.
boost::asio::awaitable<void> stream_completion(const completion_call& call,
                                               const planned_request& request,
                                               request_outcome& out);

struct http_response {
  unsigned status = 0;
  std::string content_type;
  std::string body;
  std::string error; // a transport failure (connect, send, read, the timeout), if any
};

// One request on a fresh connection, blocking; `timeout` bounds connect, send and the whole
// response (an event stream is read until the server ends it). A body is sent with
// `content_type`, and `bearer` (when given) as `Authorization: Bearer <bearer>`. Never throws: a
// transport failure is in `error`, with status 0.
http_response http_request(const http_url& url, const std::string& method,
                           const std::string& target, const std::string& body = "",
                           std::chrono::steady_clock::duration timeout = std::chrono::seconds(120),
                           const std::string& content_type = "application/json",
                           const std::string& bearer = "");

// The body of a GET that answered 200; throws std::runtime_error naming the URL otherwise.
std::string http_get_ok(const http_url& url, const std::string& target, double timeout_s);

struct served_model {
  std::string id;
  int64_t max_model_len = 0; // 0 when the server does not say
};

// GET /v1/models and the first model listed; throws std::runtime_error with the reason.
served_model fetch_served_model(const http_url& url, double timeout_s);

} // namespace supernode::services::loadgen
