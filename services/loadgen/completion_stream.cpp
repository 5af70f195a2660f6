#include "services/loadgen/completion_stream.hpp"

#include <nlohmann/json.hpp>

namespace supernode::services::loadgen {

namespace {

std::string clip(std::string_view s, size_t n = 120) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

} // namespace

void completion_stream::feed(std::string_view bytes, double now_s) {
  if (done_ || failed()) return;
  events_.clear();
  parser_.feed(bytes, events_);
  for (const auto& ev : events_) {
    if (done_ || failed()) break;
    on_data(ev.data, now_s);
  }
}

void completion_stream::finish() {
  if (!done_ && !failed()) error_ = "stream ended before data: [DONE]";
}

int64_t completion_stream::completion_tokens() const {
  return usage_completion_tokens_.value_or(static_cast<int64_t>(token_times_s_.size()));
}

void completion_stream::on_data(const std::string& data, double now_s) {
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const auto chunk = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    error_ = "malformed stream event: " + clip(data);
    return;
  }
  // Servers (vLLM among them) report a failure after the 200 header as an error event.
  if (auto e = chunk.find("error"); e != chunk.end() && !e->is_null()) {
    const auto msg = e->is_object() ? e->value("message", e->dump()) : e->dump();
    error_ = "error event: " + clip(msg);
    return;
  }
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array()) {
    error_ = "stream event without choices: " + clip(data);
    return;
  }
  if (!choices->empty()) {
    token_times_s_.push_back(now_s);
    const auto& choice = (*choices)[0];
    if (auto ids = choice.find("token_ids"); choice.is_object() && ids != choice.end()) {
      if (!ids->is_array()) {
        error_ = "token_ids is not an array: " + clip(data);
        return;
      }
      for (const auto& id : *ids) {
        if (!id.is_number_integer()) {
          error_ = "token_ids holds a non-integer: " + clip(data);
          return;
        }
        token_ids_.push_back(id.get<int32_t>());
      }
    }
  }
  if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
    if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number_integer())
      usage_completion_tokens_ = c->get<int64_t>();
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer())
      usage_prompt_tokens_ = p->get<int64_t>();
  }
}

} // namespace supernode::services::loadgen
