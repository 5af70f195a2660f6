#pragma once
// DeepSeek-V3's chat template (the Jinja "chat_template" of its tokenizer_config.json), written
// out in C++ for plain system/user/assistant conversations.

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::model {

struct chat_message {
  std::string role; // "system", "user" or "assistant"
  std::string content;
};

// The prompt text the Jinja template renders: BOS, then every system message's content joined by
// "\n\n", then "<｜User｜>"+content per user turn and "<｜Assistant｜>"+content+
// "<｜end▁of▁sentence｜>" per assistant turn, then "<｜Assistant｜>" if add_generation_prompt.
// Any other role (tool messages included, not supported yet) throws std::invalid_argument naming
// it, where the template would silently drop the message.
std::string apply_chat_template(const std::vector<chat_message>& messages,
                                bool add_generation_prompt, std::string_view bos_token);

// OpenAI-style [{"role": ..., "content": "..."}, ...]. Throws std::invalid_argument naming the
// message index and the problem (not an array, missing role or content, non-string content,
// unsupported role, tool calls).
std::vector<chat_message> parse_chat_messages(const nlohmann::json& messages);

} // namespace supernode::model
