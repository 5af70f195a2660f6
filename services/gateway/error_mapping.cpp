#include "services/gateway/error_mapping.hpp"

#include <algorithm>
#include <cctype>

namespace supernode::services::gateway {

namespace {
using protocol::serving_errc;
constexpr http_error_mapping bad_request{400, "invalid_request_error"};
constexpr http_error_mapping unavailable{503, "service_unavailable"};
constexpr http_error_mapping rate_limited{429, "rate_limit_error"};
constexpr http_error_mapping server_error{500, "server_error"};

http_error_mapping serving_mapping(serving_errc c) {
  switch (c) {
  case serving_errc::queue_full:
  case serving_errc::too_many_requests:
  case serving_errc::key_concurrency_limit:
  case serving_errc::key_token_rate_limit:
    return rate_limited;
  case serving_errc::kv_capacity_exceeded:
  case serving_errc::invalid_request:
  case serving_errc::context_length_exceeded:
    return bad_request;
  case serving_errc::model_not_found:
    return {404, "invalid_request_error"};
  case serving_errc::invalid_api_key:
    return {401, "authentication_error"};
  case serving_errc::no_decode_instance:
  case serving_errc::no_prefill_instance:
  case serving_errc::kv_exhausted:
  case serving_errc::instance_unavailable:
  case serving_errc::instance_down:
  case serving_errc::cancelled:
  case serving_errc::shutting_down:
  case serving_errc::sequence_moved:
  case serving_errc::delivery_failed:
  case serving_errc::no_scheduler:
    return unavailable;
  case serving_errc::duplicate_request:
  case serving_errc::prefill_failed:
  case serving_errc::kv_layout_mismatch:
  case serving_errc::internal:
    return server_error;
  }
  return server_error;
}
} // namespace

http_error_mapping http_mapping_of(uint16_t code) {
  if (code >= 2000 && code < 3000) return serving_mapping(static_cast<serving_errc>(code));
  if (code == static_cast<uint16_t>(protocol::transport_errc::too_large)) return bad_request;
  // Transport, the pool and expert parallelism: the cluster could not serve it now.
  if (code >= 1000 && code < 5000) return unavailable;
  return server_error;
}

api_error to_api_error(const protocol::error& e, std::string param) {
  const auto m = http_mapping_of(e.code);
  api_error out(m.status, e.message, m.openai_type, std::move(param), e.name());
  out.numeric_code = e.code;
  return out;
}

namespace {
bool is_ipv4_with_port(std::string_view w) {
  const auto colon = w.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == w.size()) return false;
  const auto digits_or_dots = [](std::string_view s) {
    return s.find_first_not_of("0123456789.") == std::string_view::npos;
  };
  const auto host = w.substr(0, colon), port = w.substr(colon + 1);
  return digits_or_dots(host) && host.find('.') != std::string_view::npos &&
         port.find_first_not_of("0123456789") == std::string_view::npos;
}

bool locates_something(std::string_view w) {
  return w.find("://") != std::string_view::npos || w.starts_with('/') || w.starts_with("./") ||
         w.starts_with("../") || w.starts_with("~/") || is_ipv4_with_port(w);
}
} // namespace

std::string without_internals(std::string_view message) {
  constexpr std::string_view opening = "([{'\"<", closing = ")]}'\",.;:>";
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    if (std::isspace(static_cast<unsigned char>(message[i]))) {
      out += message[i++];
      continue;
    }
    size_t end = i;
    while (end < message.size() && !std::isspace(static_cast<unsigned char>(message[end]))) ++end;
    std::string_view word = message.substr(i, end - i);
    const size_t lead = std::min(word.find_first_not_of(opening), word.size());
    const size_t last = word.find_last_not_of(closing);
    const size_t trail = last == std::string_view::npos || last < lead ? 0 : word.size() - last - 1;
    const auto core = word.substr(lead, word.size() - lead - trail);
    if (!core.empty() && locates_something(core)) {
      out.append(word.substr(0, lead))
          .append("<internal>")
          .append(word.substr(word.size() - trail));
    } else {
      out.append(word);
    }
    i = end;
  }
  return out;
}

api_error to_client_api_error(const protocol::error& e, const std::string& instance,
                              std::string param) {
  const auto& info = protocol::describe_error(e.code);
  std::string text = without_internals(e.message);
  if (text.empty()) text = *info.meaning ? info.meaning : "the request failed";
  return to_api_error({e.code, text + " (" + info.name + " " + std::to_string(e.code) +
                                   ", answered by " + instance + ")"},
                      std::move(param));
}

std::string error_table_markdown() {
  std::string out = "| code | name | subsystem | retry elsewhere | HTTP | meaning |\n"
                    "|---|---|---|---|---|---|\n";
  for (const auto& c : protocol::all_error_codes()) {
    const auto m = http_mapping_of(c.code);
    out += "| " + std::to_string(c.code) + " | `" + c.name + "` | " + c.subsystem + " | " +
           (c.retry_elsewhere ? "yes" : "no") + " | " + std::to_string(m.status) + " `" +
           m.openai_type + "` | " + c.meaning + " |\n";
  }
  return out;
}

} // namespace supernode::services::gateway
