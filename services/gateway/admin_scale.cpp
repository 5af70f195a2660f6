#include "services/gateway/admin_scale.hpp"

#include "services/cluster/control_socket.hpp"
#include "services/gateway/openai_api.hpp"

#include <nlohmann/json.hpp>
#include <thread>

namespace supernode::services::gateway {

namespace {
constexpr const char* json_type = "application/json";
using json = nlohmann::json;

void respond_error(http_exchange& ex, unsigned status, const std::string& message,
                   const std::string& type) {
  ex.respond(status, json_type, error_body(api_error(status, message, type)));
}
} // namespace

admin_scale::admin_scale(std::optional<api_key_table> tokens,
                         std::filesystem::path supervisor_socket)
    : tokens_(std::move(tokens)), socket_(std::move(supervisor_socket)) {}

admin_scale::~admin_scale() {
  stop();
}

void admin_scale::stop() {
  std::lock_guard lock(state_->mutex);
  state_->open = false;
}

void admin_scale::handle(std::shared_ptr<http_exchange> ex, const http_request& req) {
  if (req.method != "POST")
    return respond_error(*ex, 405, "method " + req.method + " not allowed on /admin/scale",
                         "invalid_request_error");
  if (!tokens_ || tokens_->empty())
    return respond_error(*ex, 403,
                         "the admin API is off: set [gateway] admin_token_file to enable it",
                         "permission_error");
  const auto header = req.headers.find("authorization");
  const auto presented = header == req.headers.end() ? std::nullopt : bearer_token(header->second);
  if (!presented || !tokens_->find(*presented)) {
    const api_error e(401,
                      presented ? "Incorrect admin token"
                                : "Missing admin token: send "
                                  "`Authorization: Bearer <token>`",
                      "authentication_error");
    return ex->respond(401, json_type, error_body(e), {{"WWW-Authenticate", "Bearer"}});
  }
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("counts") || !body["counts"].is_object() ||
      body["counts"].empty())
    return respond_error(*ex, 400,
                         "expected a JSON object with \"counts\": {\"<process>\": <count>, ...}",
                         "invalid_request_error");
  json request{{"request", "scale"}, {"counts", json::object()}};
  for (auto& [kind, count] : body["counts"].items()) {
    if (!count.is_number_integer() || count.get<long long>() < 0 || count.get<long long>() > 4096)
      return respond_error(*ex, 400, "counts." + kind + " must be a whole number in [0, 4096]",
                           "invalid_request_error");
    request["counts"][kind] = count;
  }
  if (body.contains("operation_id")) {
    if (!body["operation_id"].is_string() || body["operation_id"].get<std::string>().size() > 128)
      return respond_error(*ex, 400, "operation_id must be a string of at most 128 characters",
                           "invalid_request_error");
    request["operation_id"] = body["operation_id"];
  }
  long long drain_ms = 60'000;
  if (body.contains("drain_timeout_ms")) {
    if (!body["drain_timeout_ms"].is_number_integer() ||
        body["drain_timeout_ms"].get<long long>() < 1 ||
        body["drain_timeout_ms"].get<long long>() > 86'400'000)
      return respond_error(*ex, 400, "drain_timeout_ms must be a whole number in [1, 86400000]",
                           "invalid_request_error");
    drain_ms = body["drain_timeout_ms"].get<long long>();
  }
  request["drain_timeout_ms"] = drain_ms;
  if (body.contains("drain")) {
    if (!body["drain"].is_string() || (body["drain"] != "finish" && body["drain"] != "migrate"))
      return respond_error(*ex, 400, "drain must be \"finish\" or \"migrate\"",
                           "invalid_request_error");
    request["drain"] = body["drain"];
  }
  if (body.contains("switch")) {
    if (!body["switch"].is_boolean())
      return respond_error(*ex, 400, "switch must be true or false", "invalid_request_error");
    request["switch"] = body["switch"];
  }
  {
    std::lock_guard lock(state_->mutex);
    if (state_->waiting >= max_waiting)
      return respond_error(*ex, 429, "too many scale calls waiting", "rate_limit_error");
    ++state_->waiting;
  }
  std::thread([state = state_, socket = socket_, ex, text = request.dump(), drain_ms] {
    ask(state, socket, ex, text, drain_ms);
  }).detach();
}

void admin_scale::ask(const std::shared_ptr<shared_state>& state,
                      const std::filesystem::path& socket, const std::shared_ptr<http_exchange>& ex,
                      const std::string& request, long long drain_ms) {
  std::optional<std::string> answer;
  try {
    // Started slots load a model; drained ones may take the whole drain timeout.
    answer = cluster::ask_control(socket, request,
                                  std::chrono::milliseconds(drain_ms) + std::chrono::seconds(240));
  } catch (const std::exception&) {
    answer.reset(); // another user's socket, or none: no supervisor of ours
  }
  std::lock_guard lock(state->mutex); // held while responding: stop() waits for it
  --state->waiting;
  if (!state->open) return; // the gateway went down meanwhile
  const json reply = answer ? json::parse(*answer, nullptr, false) : json();
  if (!reply.is_object()) {
    respond_error(*ex, 503, "no supervisor answers for this cluster on this host",
                  "service_unavailable");
  } else if (reply.value("ok", false)) {
    ex->respond(200, json_type, reply.dump());
  } else {
    const unsigned status = reply.value("conflict", false) ? 409 : 400;
    respond_error(*ex, status, reply.value("error", std::string("refused")),
                  status == 409 ? "conflict_error" : "invalid_request_error");
  }
}

} // namespace supernode::services::gateway
