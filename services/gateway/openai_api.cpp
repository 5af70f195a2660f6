#include "services/gateway/openai_api.hpp"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace supernode::services::gateway {

using json = nlohmann::json;

api_error::api_error(unsigned status, std::string message, std::string type, std::string param,
                     std::string code)
    : std::runtime_error(std::move(message)), status(status), type(std::move(type)),
      param(std::move(param)), code(std::move(code)) {
  // nop
}

namespace {

// Generated text may hold any bytes; replacing invalid UTF-8 keeps rendering from throwing.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json null_if_empty(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

[[noreturn]] void invalid(const std::string& param, const std::string& message) {
  throw api_error(400, message, "invalid_request_error", param);
}

std::string quoted(std::string_view field) {
  // Appended piecewise: "\"" + std::string trips g++ 12's -Wrestrict false positive.
  std::string out;
  out.reserve(field.size() + 2);
  out += '"';
  out += field;
  out += '"';
  return out;
}

// A field that is absent or null counts as not given, as in OpenAI's SDKs which send null for
// unset optionals.
const json* find_field(const json& body, std::string_view name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& body, std::string_view name, bool fallback) {
  const json* v = find_field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) invalid(std::string(name), quoted(name) + " must be a boolean");
  return v->get<bool>();
}

// JSON integers only: 1.5 is a type error, not something to round. An integer beyond uint64
// arrives as a float.
int64_t get_integer(const json& v, std::string_view name) {
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) >= 9.2e18)
      invalid(std::string(name), quoted(name) + " is too large: " + v.dump());
  }
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      invalid(std::string(name), quoted(name) + " is too large");
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) invalid(std::string(name), quoted(name) + " must be an integer");
  return v.get<int64_t>();
}

float get_number(const json& body, std::string_view name, float fallback, double low,
                 bool low_inclusive, double high) {
  const json* v = find_field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) invalid(std::string(name), quoted(name) + " must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x)) invalid(std::string(name), quoted(name) + " must be a finite number");
  const bool above_low = low_inclusive ? x >= low : x > low;
  if (!above_low || x > high) {
    invalid(std::string(name), quoted(name) + " must be in " + (low_inclusive ? "[" : "(") +
                                   json(low).dump() + ", " + json(high).dump() + "], got " +
                                   v->dump());
  }
  return static_cast<float>(x);
}

void require_one(const json& body, std::string_view name) {
  const json* v = find_field(body, name);
  if (!v) return;
  if (get_integer(*v, name) != 1)
    invalid(std::string(name), quoted(name) + " must be 1: only one choice per request is served");
}

// A feature is "requested" when its field carries anything but null, false, 0 or an empty
// list/string: clients often send the neutral value explicitly.
bool requested(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0;
  if (v.is_string() || v.is_array() || v.is_object()) return !v.empty();
  return true;
}

void reject_unsupported(const json& body, api_kind kind) {
  static constexpr std::string_view fields[] = {"logprobs", "top_logprobs", "echo",
                                                "suffix",   "tools",        "functions"};
  for (std::string_view name : fields) {
    auto it = body.find(name);
    if (it == body.end()) continue;
    // Completions' "logprobs": 0 still asks for the sampled tokens' log-probabilities.
    const bool asked =
        name == "logprobs" && kind == api_kind::completion ? !it->is_null() : requested(*it);
    if (asked) invalid(std::string(name), quoted(name) + " is not supported");
  }
  if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
    const bool plain_text = it->is_object() && it->value("type", json()) == "text";
    if (!plain_text)
      invalid("response_format",
              "\"response_format\" other than {\"type\": \"text\"} is not supported");
  }
}

std::string parse_model(const json& body) {
  const json* v = find_field(body, "model");
  if (!v) invalid("model", "missing required field \"model\"");
  if (!v->is_string()) invalid("model", "\"model\" must be a string");
  if (v->get_ref<const std::string&>().empty()) invalid("model", "\"model\" must not be empty");
  return v->get<std::string>();
}

std::vector<int32_t> parse_token_ids(const json& ids) {
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (const json& id : ids) {
    if (!id.is_number_integer())
      invalid("prompt", "\"prompt\" must be a string or an array of token ids (integers)");
    const int64_t x = get_integer(id, "prompt");
    if (x < 0 || x > std::numeric_limits<int32_t>::max())
      invalid("prompt", "\"prompt\" token id " + std::to_string(x) + " is out of range");
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

void parse_prompt(const json& body, completion_request& out) {
  const json* v = find_field(body, "prompt");
  if (!v) invalid("prompt", "missing required field \"prompt\"");
  if (v->is_string()) {
    out.prompt_text = v->get<std::string>();
    return;
  }
  if (!v->is_array())
    invalid("prompt", "\"prompt\" must be a string or an array of token ids, not " +
                          std::string(v->type_name()));
  if (v->empty()) invalid("prompt", "\"prompt\" must not be empty");
  // A batch of one is the same request as its single prompt; batches of several would need n
  // choices per response, which we do not serve.
  const json& first = v->front();
  if (first.is_string() || first.is_array()) {
    if (v->size() > 1)
      invalid("prompt", "\"prompt\": batch prompts are not supported: send one prompt per request");
    if (first.is_string()) {
      out.prompt_text = first.get<std::string>();
      return;
    }
    if (first.empty()) invalid("prompt", "\"prompt\" must not be empty");
    out.prompt_ids = parse_token_ids(first);
    return;
  }
  out.prompt_ids = parse_token_ids(*v);
}

void parse_messages(const json& body, completion_request& out) {
  const json* v = find_field(body, "messages");
  if (!v) invalid("messages", "missing required field \"messages\"");
  try {
    out.messages = model::parse_chat_messages(*v);
  } catch (const std::invalid_argument& e) {
    invalid("messages", std::string("\"messages\": ") + e.what());
  }
  if (out.messages.empty()) invalid("messages", "\"messages\" must not be empty");
}

void parse_max_tokens(const json& body, api_kind kind, completion_request& out) {
  // OpenAI deprecated max_tokens for chat in favour of max_completion_tokens; both are accepted
  // and the newer one wins.
  std::string_view name = "max_tokens";
  const json* v = nullptr;
  if (kind == api_kind::chat) {
    if ((v = find_field(body, "max_completion_tokens"))) name = "max_completion_tokens";
  }
  if (!v) v = find_field(body, "max_tokens");
  if (!v) return;
  const int64_t x = get_integer(*v, name);
  if (x < 1) invalid(std::string(name), quoted(name) + " must be at least 1, got " + v->dump());
  if (x > std::numeric_limits<int32_t>::max())
    invalid(std::string(name), quoted(name) + " is too large: " + v->dump());
  out.max_tokens = static_cast<int32_t>(x);
}

void parse_sampling(const json& body, completion_request& out) {
  out.temperature = get_number(body, "temperature", 1.0f, 0.0, true, 2.0);
  out.top_p = get_number(body, "top_p", 1.0f, 0.0, false, 1.0);
  if (const json* v = find_field(body, "top_k")) {
    const int64_t k = get_integer(*v, "top_k");
    if (k < -1 || k > std::numeric_limits<int32_t>::max())
      invalid("top_k",
              "\"top_k\" must be -1 (off), 0 (off) or a positive integer, got " + v->dump());
    out.top_k = k == -1 ? 0 : static_cast<int32_t>(k);
  }
  if (const json* v = find_field(body, "seed")) {
    if (v->is_number_unsigned()) {
      out.seed = v->get<uint64_t>();
    } else {
      const int64_t s = get_integer(*v, "seed");
      if (s < 0) invalid("seed", "\"seed\" must not be negative, got " + v->dump());
      out.seed = static_cast<uint64_t>(s);
    }
  }
}

void parse_stop(const json& body, completion_request& out) {
  const json* v = find_field(body, "stop");
  if (!v) return;
  constexpr size_t max_stops = 16;
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty()) invalid("stop", "\"stop\" must not be empty");
    out.stop.push_back(v->get<std::string>());
    return;
  }
  if (!v->is_array()) invalid("stop", "\"stop\" must be a string or an array of strings");
  if (v->size() > max_stops)
    invalid("stop", "\"stop\" allows at most " + std::to_string(max_stops) + " strings, got " +
                        std::to_string(v->size()));
  for (const json& s : *v) {
    if (!s.is_string()) invalid("stop", "\"stop\" must be a string or an array of strings");
    if (s.get_ref<const std::string&>().empty())
      invalid("stop", "\"stop\" strings must not be empty");
    out.stop.push_back(s.get<std::string>());
  }
}

void parse_streaming(const json& body, completion_request& out) {
  out.stream = get_bool(body, "stream", false);
  const json* options = find_field(body, "stream_options");
  if (!options) return;
  if (!out.stream)
    invalid("stream_options", "\"stream_options\" is only allowed when \"stream\" is true");
  if (!options->is_object()) invalid("stream_options", "\"stream_options\" must be an object");
  if (auto it = options->find("include_usage"); it != options->end() && !it->is_null()) {
    if (!it->is_boolean())
      invalid("stream_options", "\"stream_options\": \"include_usage\" must be a boolean");
    out.include_usage = it->get<bool>();
  }
}

json usage_json(const completion_result& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens}};
}

json envelope(api_kind kind, const completion_result& r, bool chunk) {
  std::string_view object = kind == api_kind::completion ? "text_completion"
                            : chunk                      ? "chat.completion.chunk"
                                                         : "chat.completion";
  return {{"id", r.id}, {"object", object}, {"created", r.created}, {"model", r.model}};
}

// nlohmann's parser throws out_of_range for a number beyond double (1e400) without saying where;
// a SAX pass over the same text finds the top-level field that held it.
class overflow_locator : public json::json_sax_t {
public:
  std::string field;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth_, true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return ++depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool key(string_t& k) override {
    if (depth_ == 1) top_key_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    field = top_key_;
    return false;
  }

private:
  int depth_ = 0;
  std::string top_key_;
};

std::string overflowing_field(std::string_view body_text) {
  overflow_locator locator;
  json::sax_parse(body_text, &locator, json::input_format_t::json, false);
  return locator.field;
}

} // namespace

std::string error_body(const api_error& error) {
  json e = {{"message", error.what()},
            {"type", error.type},
            {"param", null_if_empty(error.param)},
            {"code", null_if_empty(error.code)}};
  if (error.numeric_code != 0) e["supernode_code"] = error.numeric_code;
  return dump(json{{"error", std::move(e)}});
}

completion_request parse_completion_request(std::string_view body_text, api_kind kind) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::parse_error& e) {
    invalid("", std::string("malformed JSON: ") + e.what());
  } catch (const json::out_of_range&) {
    const std::string field = overflowing_field(body_text);
    const std::string what = field.empty() ? std::string("a number") : gateway::quoted(field);
    invalid(field, what + " is out of range: numbers must be finite doubles");
  }
  if (!body.is_object())
    invalid("", "the request body must be a JSON object, not " + std::string(body.type_name()));

  completion_request out;
  out.kind = kind;
  out.model = parse_model(body);
  if (kind == api_kind::completion)
    parse_prompt(body, out);
  else
    parse_messages(body, out);
  require_one(body, "n");
  require_one(body, "best_of");
  reject_unsupported(body, kind);
  parse_max_tokens(body, kind, out);
  parse_sampling(body, out);
  parse_stop(body, out);
  out.ignore_eos = get_bool(body, "ignore_eos", false);
  out.return_token_ids = get_bool(body, "return_token_ids", false);
  parse_streaming(body, out);
  return out;
}

std::string completion_response(api_kind kind, const completion_result& r) {
  json choice = {{"index", 0}};
  if (kind == api_kind::completion)
    choice["text"] = r.text;
  else
    choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = null_if_empty(r.finish_reason);
  if (r.token_ids) choice["token_ids"] = *r.token_ids;
  json j = envelope(kind, r, false);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = usage_json(r);
  return dump(j);
}

std::string stream_chunk(api_kind kind, const completion_result& meta, std::string_view delta_text,
                         const std::string* finish_reason, bool role_chunk) {
  json choice = {{"index", 0}};
  if (kind == api_kind::completion) {
    choice["text"] = delta_text;
  } else if (role_chunk) {
    choice["delta"] = {{"role", "assistant"}, {"content", ""}};
  } else if (finish_reason && delta_text.empty()) {
    choice["delta"] = json::object();
  } else {
    choice["delta"] = {{"content", delta_text}};
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? json(*finish_reason) : json(nullptr);
  if (meta.token_ids) choice["token_ids"] = *meta.token_ids;
  json j = envelope(kind, meta, true);
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = nullptr;
  return dump(j);
}

std::string usage_chunk(api_kind kind, const completion_result& meta) {
  json j = envelope(kind, meta, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(meta);
  return dump(j);
}

std::string models_response(const std::vector<model_card>& models) {
  json data = json::array();
  for (const model_card& m : models) {
    data.push_back({{"id", m.id},
                    {"object", "model"},
                    {"created", m.created},
                    {"owned_by", m.owned_by},
                    {"max_model_len", m.max_model_len}});
  }
  return dump(json{{"object", "list"}, {"data", std::move(data)}});
}

} // namespace supernode::services::gateway
