#pragma once
// Reads the body of a streamed OpenAI /v1/completions response: SSE events holding
// text_completion chunks, an optional usage chunk with empty choices, then `data: [DONE]`.
// Anything else (bad JSON, an error object, the stream ending before [DONE]) fails the request.

#include "services/loadgen/sse_parser.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::services::loadgen {

class completion_stream {
public:
  // Body bytes as they arrive; `now_s` stamps the token events they complete.
  void feed(std::string_view bytes, double now_s);
  // The body ended; a stream without [DONE] is a failure.
  void finish();

  bool done() const { return done_; }
  bool failed() const { return error_.has_value(); }
  const std::optional<std::string>& error() const { return error_; }
  const std::vector<double>& token_times_s() const { return token_times_s_; }
  // Every chunk's choices[0].token_ids, concatenated (empty when the server sends none).
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  // Usage's completion_tokens if the server reported it, else the token events seen.
  int64_t completion_tokens() const;
  std::optional<int64_t> usage_prompt_tokens() const { return usage_prompt_tokens_; }

private:
  void on_data(const std::string& data, double now_s);

  sse_parser parser_;
  std::vector<sse_event> events_;
  std::vector<double> token_times_s_;
  std::vector<int32_t> token_ids_;
  std::optional<int64_t> usage_completion_tokens_;
  std::optional<int64_t> usage_prompt_tokens_;
  std::optional<std::string> error_;
  bool done_ = false;
};

} // namespace supernode::services::loadgen
