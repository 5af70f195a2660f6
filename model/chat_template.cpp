#include "model/chat_template.hpp"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace supernode::model {
namespace {

constexpr std::string_view user_tag = "<｜User｜>";
constexpr std::string_view assistant_tag = "<｜Assistant｜>";
constexpr std::string_view end_of_sentence = "<｜end▁of▁sentence｜>";

bool supported_role(std::string_view role) {
  return role == "system" || role == "user" || role == "assistant";
}

[[noreturn]] void unsupported_role(std::string_view role, size_t index) {
  throw std::invalid_argument("chat message " + std::to_string(index) + ": role \"" +
                              std::string(role) +
                              "\" is not supported (system, user and assistant are)");
}

} // namespace

std::string apply_chat_template(const std::vector<chat_message>& messages,
                                bool add_generation_prompt, std::string_view bos_token) {
  std::string system_prompt;
  bool first_system = true;
  size_t size = bos_token.size() + assistant_tag.size();
  for (size_t i = 0; i < messages.size(); ++i) {
    const chat_message& m = messages[i];
    if (!supported_role(m.role)) unsupported_role(m.role, i);
    size += m.content.size() + assistant_tag.size() + end_of_sentence.size();
    if (m.role != "system") continue;
    if (!first_system) system_prompt += "\n\n";
    system_prompt += m.content;
    first_system = false;
  }

  std::string out;
  out.reserve(size);
  out += bos_token;
  out += system_prompt;
  for (const chat_message& m : messages) {
    if (m.role == "user") {
      out += user_tag;
      out += m.content;
    } else if (m.role == "assistant") {
      out += assistant_tag;
      out += m.content;
      out += end_of_sentence;
    }
  }
  if (add_generation_prompt) out += assistant_tag;
  return out;
}

std::vector<chat_message> parse_chat_messages(const nlohmann::json& messages) {
  if (!messages.is_array())
    throw std::invalid_argument("chat messages: expected a JSON array of messages");
  std::vector<chat_message> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    const std::string where = "chat message " + std::to_string(i);
    if (!m.is_object()) throw std::invalid_argument(where + ": expected a JSON object");
    auto role = m.find("role");
    if (role == m.end()) throw std::invalid_argument(where + ": missing \"role\"");
    if (!role->is_string()) throw std::invalid_argument(where + ": \"role\" is not a string");
    const std::string& role_name = role->get_ref<const std::string&>();
    if (!supported_role(role_name)) unsupported_role(role_name, i);
    if (auto calls = m.find("tool_calls");
        calls != m.end() && !calls->is_null() && !(calls->is_array() && calls->empty())) {
      throw std::invalid_argument(where + ": \"tool_calls\" are not supported");
    }
    auto content = m.find("content");
    if (content == m.end()) throw std::invalid_argument(where + ": missing \"content\"");
    if (!content->is_string()) {
      throw std::invalid_argument(where + ": \"content\" must be a string, not " +
                                  std::string(content->type_name()));
    }
    out.push_back({role_name, content->get<std::string>()});
  }
  return out;
}

} // namespace supernode::model
