#pragma once
// The OpenAI-compatible wire format of the gateway: request bodies of /v1/completions and
// /v1/chat/completions parsed and validated into one plain struct, responses, stream chunks and
// errors rendered as the OpenAI clients expect them. No I/O here: the HTTP layer passes bodies in
// and sends the strings out, so every rule is unit-testable.

#include "model/chat_template.hpp"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::services::gateway {

// An error the client caused (or one we report to it): rendered by error_body() and sent with
// `status`. Empty `param` and `code` become JSON null, as in OpenAI's responses.
struct api_error : std::runtime_error {
  unsigned status;
  std::string type;
  std::string param;
  std::string code;
  uint16_t numeric_code = 0; // protocol::error code, when the error came from one
  api_error(unsigned status, std::string message, std::string type = "invalid_request_error",
            std::string param = "", std::string code = "");
};

// {"error":{"message":...,"type":...,"param":...|null,"code":...|null}}
std::string error_body(const api_error& error);

enum class api_kind { completion, chat };

struct completion_request {
  api_kind kind = api_kind::completion;
  std::string model;
  // Completions: "prompt" as text, or as token ids. Exactly one of the two is set.
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  // Chat: the conversation, to be rendered by model::apply_chat_template.
  std::vector<model::chat_message> messages;
  // Unset means "as many as the context allows"; the caller knows the context size.
  std::optional<int32_t> max_tokens;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0; // 0: off
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;
  // vLLM's extension: the generated token ids alongside the text (choices[0].token_ids).
  bool return_token_ids = false;
};

// Throws api_error (400, param naming the field) for: a body that is not JSON or not an object,
// a missing required field, a field of the wrong JSON type or out of range, n or best_of other
// than 1, batch prompts, and features we do not serve (logprobs, echo, suffix, tools, functions,
// response_format). Unknown fields are ignored, as vLLM does.
completion_request parse_completion_request(std::string_view body, api_kind kind);

// What the caller knows about a finished (or streaming) request. An empty finish_reason is
// rendered as null.
struct completion_result {
  std::string id;
  int64_t created = 0; // unix seconds
  std::string model;
  std::string text;
  std::string finish_reason; // "stop", "length", ...
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Rendered as choices[0].token_ids when set: all tokens in a response, a chunk's own in a
  // stream chunk.
  std::optional<std::vector<int32_t>> token_ids;
};

// The non-streaming response: "text_completion" or "chat.completion".
std::string completion_response(api_kind kind, const completion_result& result);

// One SSE payload (the JSON only; the server adds "data: "). A chat stream starts with a chunk of
// role_chunk=true (delta {"role":"assistant","content":""}); later chunks carry delta_text; the
// finishing chunk passes finish_reason (its delta/text may be empty). meta.text is not used.
std::string stream_chunk(api_kind kind, const completion_result& meta, std::string_view delta_text,
                         const std::string* finish_reason, bool role_chunk = false);

// The chunk that follows the finishing one when stream_options.include_usage: empty choices, and
// the usage counted in meta.
std::string usage_chunk(api_kind kind, const completion_result& meta);

inline constexpr std::string_view stream_done = "[DONE]";

struct model_card {
  std::string id;
  int64_t created = 0;
  std::string owned_by = "supernode";
  int64_t max_model_len = 0;
};

// GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by",
// "max_model_len"}, ...]}
std::string models_response(const std::vector<model_card>& models);

} // namespace supernode::services::gateway
