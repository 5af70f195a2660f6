#pragma once
// What one benchmark request did, as the client saw it. Times are seconds since the start of
// the run on the steady clock, so they compare across requests.

#include <cstdint>
#include <string>
#include <vector>

namespace supernode::services::loadgen {

struct request_outcome {
  int64_t prompt_tokens = 0;
  int64_t max_tokens = 0;
  double send_s = 0;
  double end_s = 0;
  // Arrival of every event that carried a choice (one generated token each).
  std::vector<double> token_times_s;
  // The generated token ids, in arrival order, when the request asked for them
  // (run_options::return_token_ids: the gateway then sends each chunk's `token_ids`).
  std::vector<int32_t> token_ids;
  // From the final usage event when the server sent one, else the number of token events.
  int64_t completion_tokens = 0;
  int http_status = 0;
  bool ok = false;
  // The connection failed (connect, send, or the connection broke before the response ended),
  // as opposed to an HTTP error, an error event or the deadline: what --retry resubmits.
  bool connection_error = false;
  // Times it was resubmitted after a connection error; the other fields are the last attempt's,
  // except send_s, which stays the first attempt's (the client waited all along).
  int64_t retries = 0;
  std::string error;
};

} // namespace supernode::services::loadgen
