#include "services/gateway/gateway_service.hpp"

#include "model/chat_template.hpp"
#include "services/cluster/control_socket.hpp"
#include "services/gateway/cluster_metrics.hpp"
#include "services/gateway/error_mapping.hpp"
#include "services/gateway/health.hpp"
#include "services/serving/delivery.hpp"

#include <nlohmann/json.hpp>
#include <random>

namespace supernode::services {

using namespace gateway;
using protocol::request_key;

namespace {
constexpr const char* json_type = "application/json";

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
} // namespace

gateway_service::gateway_service(const serving_config& config)
    : config_(config), model_config_(model::model_config::load(config.model_path / "config.json")),
      tokenizer_(model::tokenizer::load(config.model_path)),
      context_limit_(std::min(config.max_context, model_config_.max_position_embeddings)),
      model_id_(config.model_id()), created_(unix_seconds()),
      keys_(config.api_keys_file.empty() ? api_key_table()
                                         : api_key_table::load(config.api_keys_file)),
      tracker_(
          metrics_, config.max_pending,
          {[this](const protocol::admit_request& m) { return send_admit(m); },
           [this](const tracked_request& r, const std::string& why) { cancel_upstream(r, why); },
           [this](int32_t token) { return token_text(token); },
           [this](const std::string& from, const std::string& reason, const std::string& detail) {
             if (out_) out_->reject(from, reason, detail);
           },
           [this](const std::string& peer) { return out_ && out_->is_alive(peer); }},
          {std::chrono::milliseconds(config.recovery_timeout_ms),
           std::chrono::milliseconds(config.stall_timeout_ms),
           std::chrono::milliseconds(config.first_token_timeout_ms)}) {
  protocol::register_serving_messages();
  for (const auto& key : keys_.entries())
    limiters_.push_back(std::make_unique<key_limiter>(key.limits));
}

gateway_service::~gateway_service() {
  stop();
}

void gateway_service::start(transport::endpoint& out) {
  out_ = &out;
  if (keys_.empty() && !config_.allow_unauthenticated && !is_loopback_host(config_.http_host))
    throw std::runtime_error(
        "gateway: refusing to listen on " + config_.http_host +
        " without API keys: anyone who reaches it could use the cluster. Set [gateway] "
        "api_keys_file, or accept an open API with `supernode serve --allow-unauthenticated` or "
        "[gateway] allow_unauthenticated = true (loopback hosts need neither)");
  log_ = log::logger(out.self());
  tracker_.set_log(log_);
  http_server_options o;
  o.host = config_.http_host;
  o.port = listen_port(out);
  o.max_body_bytes = config_.max_body_bytes;
  o.header_timeout = std::chrono::milliseconds(config_.header_timeout_ms);
  o.idle_timeout = std::chrono::milliseconds(config_.idle_timeout_ms);
  o.max_connections_per_client = static_cast<size_t>(config_.max_connections_per_client);
  o.log = log_;
  admin_ = std::make_unique<admin_scale>(
      config_.admin_token_file.empty()
          ? std::nullopt
          : std::optional(api_key_table::load(config_.admin_token_file, "admin_token_file")),
      out.cluster().run_dir / "supervisor.sock");
  http_ =
      std::make_unique<http_server>(o, [this](std::shared_ptr<http_exchange> ex, http_request req) {
        handle(ex, std::move(req));
      });
  http_->start();
  start_planner(out);
}

void gateway_service::start_planner(transport::endpoint& out) {
  if (!config_.planner.enabled || out.self() != "gateway-0") return;
  const auto kinds = planner::planner_process_kinds(out.cluster(), config_.planner);
  if (kinds.problem)
    throw std::runtime_error("gateway: the planner cannot run: [" +
                             transport::table_name(kinds.problem->table) + "] " +
                             kinds.problem->key + " " + kinds.problem->what);
  planner_hooks hooks;
  hooks.ask_supervisor = [socket = out.cluster().run_dir / "supervisor.sock"](
                             const std::string& request, std::chrono::milliseconds timeout) {
    return cluster::ask_control(socket, request, timeout);
  };
  hooks.stats = [this] {
    std::lock_guard lock(stats_mutex_);
    return stats_;
  };
  hooks.latencies = [this](planner_runner::clock::time_point since) {
    return tracker_.latencies().p90_since(since);
  };
  hooks.send_batch_cap = [this](int64_t cap) { send_batch_cap(cap); };
  planner_ = std::make_unique<planner_runner>(
      config_.planner,
      planner::planner_limits{config_.decode_max_batch, config_.prefill_token_budget}, kinds.kinds,
      std::move(hooks), log_, "planner-" + std::to_string(out.incarnation()) + "-");
  planner_->start();
}

void gateway_service::send_batch_cap(int64_t cap) {
  const auto message = transport::make_envelope(protocol::decode_batch_cap{cap});
  for (const auto& decode : instances_with_role(out_->cluster(), "decode"))
    if (out_->is_alive(decode)) out_->send("control", decode, message);
}

void gateway_service::stop() {
  if (planner_) planner_->stop();
  if (admin_) admin_->stop();
  if (http_) http_->stop();
  tracker_.stop({protocol::serving_errc::shutting_down, "gateway shutting down"});
}

uint16_t gateway_service::listen_port(const transport::endpoint& out) const {
  // Gateway N of a cluster listens on [gateway] port + N, so several fit one host; 0 stays any
  // free port for each.
  if (config_.http_port == 0) return 0;
  const int role_index = out.cluster().instance(out.self()).role_index;
  const int port = config_.http_port + role_index;
  if (port > 65535)
    throw std::runtime_error("gateway: [gateway] port " + std::to_string(config_.http_port) +
                             " + " + std::to_string(role_index) + " is past 65535");
  return static_cast<uint16_t>(port);
}

uint16_t gateway_service::http_port() const {
  return http_ ? http_->port() : 0;
}

std::string gateway_service::public_address() const {
  return "http://" + config_.http_host + ":" + std::to_string(http_port());
}

size_t gateway_service::live_requests() const {
  return tracker_.in_flight();
}

std::string gateway_service::scheduler() const {
  for (auto& s : instances_with_role(out_->cluster(), "scheduler"))
    if (out_->is_alive(s)) return s;
  return {};
}

bool gateway_service::authenticate(http_exchange& ex, const http_request& req,
                                   const api_key_entry*& key) {
  key = nullptr;
  if (keys_.empty()) return true;
  const auto header = req.headers.find("authorization");
  const auto presented = header == req.headers.end() ? std::nullopt : bearer_token(header->second);
  if (presented) key = keys_.find(*presented);
  if (key) return true;
  const api_error e =
      to_api_error({protocol::serving_errc::invalid_api_key,
                    presented ? "Incorrect API key provided"
                              : "Missing API key: send `Authorization: Bearer <key>`"});
  ex.respond(e.status, json_type, error_body(e), {{"WWW-Authenticate", "Bearer"}});
  return false;
}

key_limiter& gateway_service::limiter_of(const api_key_entry& key) {
  return *limiters_[static_cast<size_t>(&key - keys_.entries().data())];
}

void gateway_service::handle(std::shared_ptr<http_exchange> ex, http_request req) {
  const auto path = req.target.substr(0, req.target.find('?'));
  auto not_allowed = [&] {
    ex->respond(405, json_type,
                error_body(api_error(405, "method " + req.method + " not allowed on " + path)));
  };
  const api_key_entry* key = nullptr;
  if (path.starts_with("/v1/") && !authenticate(*ex, req, key)) {
    // Known endpoints by name; any other path under one label, so clients cannot grow the series.
    const bool known =
        path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/models";
    tracker_.count_request(known ? path : "/v1/other", "401");
    return;
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (req.method != "POST") return not_allowed();
    return handle_completion(
        ex, req, path == "/v1/completions" ? api_kind::completion : api_kind::chat, key);
  }
  if (path == "/v1/models") {
    if (req.method != "GET") return not_allowed();
    if (key) count_api_key_request(metrics_, key->name, "200");
    return ex->respond(200, json_type,
                       models_response({{model_id_, created_, "supernode", context_limit_}}));
  }
  if (path == "/health") {
    if (req.method != "GET") return not_allowed();
    const auto health = gateway::assess_health(member_health());
    return ex->respond(health.status, json_type, health.json());
  }
  if (path == "/admin/scale") return admin_->handle(ex, req);
  if (path == "/metrics") {
    if (req.method != "GET") return not_allowed();
    return ex->respond(200, "text/plain; version=0.0.4", render_metrics());
  }
  ex->respond(404, json_type, error_body(api_error(404, "no route " + path, "not_found_error")));
}

std::vector<int32_t> gateway_service::prompt_tokens(const completion_request& api) const {
  try {
    if (api.kind == api_kind::chat) {
      const auto bos = tokenizer_.decode(std::vector<int32_t>{tokenizer_.bos_id()});
      return tokenizer_.encode(model::apply_chat_template(api.messages, true, bos), false);
    }
    if (api.prompt_text) return tokenizer_.encode(*api.prompt_text, true);
  } catch (const std::invalid_argument& e) {
    throw api_error(400, std::string("cannot tokenize the prompt: ") + e.what(),
                    "invalid_request_error", api.kind == api_kind::chat ? "messages" : "prompt");
  }
  const int64_t vocab = model_config_.vocab_size;
  for (size_t i = 0; i < api.prompt_ids.size(); ++i)
    if (api.prompt_ids[i] < 0 || api.prompt_ids[i] >= vocab)
      throw api_error(400,
                      "prompt token " + std::to_string(api.prompt_ids[i]) + " at index " +
                          std::to_string(i) + " is outside the vocabulary [0, " +
                          std::to_string(vocab) + ")",
                      "invalid_request_error", "prompt");
  return api.prompt_ids;
}

std::shared_ptr<tracked_request> gateway_service::parse_request(const http_request& req,
                                                                api_kind kind) const {
  auto r = std::make_shared<tracked_request>();
  r->kind = kind;
  r->api = parse_completion_request(req.body, kind);
  using protocol::serving_errc;
  if (r->api.model != model_id_)
    throw to_api_error(
        {serving_errc::model_not_found,
         "The model '" + r->api.model + "' does not exist (serving '" + model_id_ + "')"},
        "model");
  r->prompt = prompt_tokens(r->api);
  const auto prompt = static_cast<int64_t>(r->prompt.size());
  if (prompt == 0) throw api_error(400, "the prompt is empty", "invalid_request_error", "prompt");
  if (prompt >= context_limit_)
    throw to_api_error({serving_errc::context_length_exceeded,
                        "This model's maximum context length is " + std::to_string(context_limit_) +
                            " tokens; the prompt has " + std::to_string(prompt) + " tokens"},
                       kind == api_kind::chat ? "messages" : "prompt");
  const int64_t max_tokens = r->api.max_tokens.value_or(
      std::min<int64_t>(config_.default_max_tokens, context_limit_ - prompt));
  if (prompt + max_tokens > context_limit_)
    throw to_api_error({serving_errc::context_length_exceeded,
                        "This model's maximum context length is " + std::to_string(context_limit_) +
                            " tokens. However, you requested " +
                            std::to_string(prompt + max_tokens) + " tokens (" +
                            std::to_string(prompt) + " in the prompt, " +
                            std::to_string(max_tokens) + " in the completion)"},
                       "max_tokens");
  r->api.max_tokens = static_cast<int32_t>(max_tokens);
  r->text = std::make_unique<text_stream>(r->api.stop);
  r->arrived = tracked_request::clock::now();
  r->meta.created = unix_seconds();
  r->meta.model = model_id_;
  r->meta.prompt_tokens = static_cast<int64_t>(r->prompt.size());
  return r;
}

namespace {
protocol::admit_request admission_of(const tracked_request& r) {
  protocol::admit_request admit;
  admit.spec.prompt = r.prompt;
  admit.spec.max_tokens = *r.api.max_tokens;
  admit.spec.temperature = r.api.temperature;
  admit.spec.top_p = r.api.top_p;
  admit.spec.top_k = r.api.top_k;
  admit.spec.seed = r.api.seed ? *r.api.seed : std::random_device{}();
  admit.spec.stop_at_eos = !r.api.ignore_eos;
  return admit;
}
} // namespace

void gateway_service::handle_completion(std::shared_ptr<http_exchange> ex, const http_request& req,
                                        api_kind kind, const api_key_entry* key) {
  auto refuse = [&](const api_error& e, const header_fields& extra = {}) {
    const auto status = std::to_string(e.status);
    tracker_.count_request(endpoint_label(kind), status);
    if (key) count_api_key_request(metrics_, key->name, status);
    ex->respond(e.status, json_type, error_body(e), extra);
  };
  std::shared_ptr<tracked_request> r;
  try {
    r = parse_request(req, kind);
  } catch (const api_error& e) {
    return refuse(e);
  }
  if (key) {
    r->key_name = key->name;
    const auto prompt = static_cast<int64_t>(r->prompt.size());
    if (auto refusal = limiter_of(*key).try_acquire(prompt, r->lease))
      return refuse(to_api_error(refusal->why),
                    {{"Retry-After", std::to_string(refusal->retry_after_seconds)}});
  }
  if (!tracker_.reserve()) {
    r->lease.refund();
    return refuse(to_api_error(
        {protocol::serving_errc::too_many_requests,
         "too many requests in flight (" + std::to_string(tracker_.in_flight()) + ")"}));
  }
  auto admit = admission_of(*r);
  r->ex = ex;
  r->id = tracker_.next_id();
  r->meta.id =
      (kind == api_kind::chat ? "chatcmpl-" : "cmpl-") + out_->self() + "-" + std::to_string(r->id);
  admit.key = request_key{out_->self(), r->id};
  if (r->api.stream && kind == api_kind::chat)
    ex->send_event(stream_chunk(kind, r->meta, "", nullptr, true));
  const uint64_t id = r->id;
  tracker_.admit(std::move(r), std::move(admit));
  // After the admission is posted, so a client already gone is handled after it.
  ex->set_disconnect_handler([this, id] { tracker_.client_gone(id); });
}

transport::send_status gateway_service::send_admit(const protocol::admit_request& message) {
  const auto target = scheduler();
  if (target.empty()) return transport::send_status::peer_down;
  return out_->send("control", target, transport::make_envelope(message));
}

void gateway_service::cancel_upstream(const tracked_request& r, const std::string& why) {
  if (!out_) return;
  const request_key key{out_->self(), r.cluster_id};
  auto msg = transport::make_envelope(
      protocol::cancel_request{key, {protocol::serving_errc::cancelled, why}});
  // Placed: the decode instance owns it. Not yet (or the placement is still on its way): the
  // scheduler removes it from its queue or forwards the cancel to the decode instance.
  if (r.placed())
    out_->send("control", r.decode, msg);
  else if (auto s = scheduler(); !s.empty())
    out_->send("control", s, msg);
}

void gateway_service::on(const transport::peer_id& from,
                         std::shared_ptr<const protocol::token_batch> b, transport::endpoint&) {
  tracker_.tokens(from, std::move(b)); // checked against each request's placement there
}

void gateway_service::on(const transport::peer_id& from, const protocol::request_placed& p,
                         transport::endpoint& out) {
  if (!out.expect_role(from, "scheduler", "request_placed")) return;
  tracker_.placed(p);
}

void gateway_service::on(const transport::peer_id& from, const protocol::admit_rejected& rej,
                         transport::endpoint& out) {
  if (!out.expect_role(from, "scheduler", "admit_rejected")) return;
  tracker_.rejected(rej);
}

void gateway_service::on(const transport::peer_id& from,
                         std::shared_ptr<const protocol::cluster_stats> s,
                         transport::endpoint& out) {
  if (!out.expect_role(from, "scheduler", "cluster_stats")) return;
  std::lock_guard lock(stats_mutex_);
  stats_ = std::move(s);
}

std::string gateway_service::token_text(int32_t token) const {
  return tokenizer_.decode(std::span(&token, 1), /*skip_special=*/true, /*skip_unknown=*/true);
}

void gateway_service::on_tick(transport::endpoint&) {
  tracker_.tick();
}

void gateway_service::on_member_event(const transport::membership_event& event,
                                      transport::endpoint&) {
  if (event.what == transport::membership_event::kind::joined) return;
  tracker_.peer_down(event.peer, event.reason, out_ && scheduler().empty());
}

std::vector<gateway::member_health> gateway_service::member_health() const {
  std::map<std::string, protocol::error> unavailable;
  {
    std::lock_guard lock(stats_mutex_);
    if (stats_)
      for (const auto& i : stats_->instances) unavailable[i.name] = i.unavailable;
  }
  std::vector<gateway::member_health> out;
  for (const auto& inst : out_->cluster().instances()) {
    if (inst.role == "gateway") continue;
    out.push_back({inst.name, inst.role, out_->is_alive(inst.name), unavailable[inst.name]});
  }
  return out;
}

std::string gateway_service::render_metrics() {
  gateway::cluster_snapshot snap;
  {
    std::lock_guard lock(stats_mutex_);
    if (stats_) snap.stats = *stats_;
  }
  snap.gateway_requests_in_flight = tracker_.in_flight();
  if (out_) {
    snap.members = member_health();
    snap.gateway = out_->self();
    snap.gateway_planes = plane_traffic_of(*out_);
    snap.gateway_unexpected = out_->unexpected_messages();
    snap.gateway_rejected = out_->rejected_messages();
  }
  gateway::render_cluster_metrics(metrics_, snap);
  return metrics_.render() + (planner_ ? planner_->render_metrics() : std::string());
}

} // namespace supernode::services
