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
  // From the final usage event when the server sent one, else the number of token events.
  int64_t completion_tokens = 0;
  int http_status = 0;
  bool ok = false;
  std::string error;
};

} // namespace supernode::services::loadgen
