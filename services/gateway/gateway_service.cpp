#include "services/gateway/gateway_service.hpp"

#include "model/chat_template.hpp"
#include "services/gateway/cluster_metrics.hpp"
#include "services/gateway/error_mapping.hpp"
#include "services/serving/delivery.hpp"

#include <nlohmann/json.hpp>
#include <random>

namespace supernode::services {

using namespace gateway;
using protocol::request_key;

struct gateway_service::live_request {
  uint64_t id = 0;
  api_kind kind = api_kind::completion;
  completion_request api;
  std::shared_ptr<http_exchange> ex;
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::unique_ptr<text_stream> text;
  std::string decode, prefill; // known once the scheduler placed it
  bool done = false;
  bool placed() const { return !decode.empty(); }
  clock::time_point arrived, first_token, last_token;
  completion_result meta;
};

namespace {
constexpr const char* json_type = "application/json";

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string endpoint_label(api_kind kind) {
  return kind == api_kind::chat ? "/v1/chat/completions" : "/v1/completions";
}
} // namespace

gateway_service::gateway_service(const serving_config& config)
    : config_(config), model_config_(model::model_config::load(config.model_path / "config.json")),
      tokenizer_(model::tokenizer::load(config.model_path)),
      context_limit_(std::min(config.max_context, model_config_.max_position_embeddings)),
      model_id_(config.model_id()), created_(unix_seconds()) {
  protocol::register_serving_messages();
}

gateway_service::~gateway_service() {
  stop();
}

void gateway_service::start(transport::endpoint& out) {
  out_ = &out;
  http_server_options o;
  o.host = config_.http_host;
  o.port = static_cast<uint16_t>(config_.http_port);
  o.max_body_bytes = config_.max_body_bytes;
  http_ =
      std::make_unique<http_server>(o, [this](std::shared_ptr<http_exchange> ex, http_request req) {
        handle(ex, std::move(req));
      });
  http_->start();
}

void gateway_service::stop() {
  if (http_) http_->stop();
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<live_request>> open;
  for (auto& [id, r] : live_) open.push_back(r);
  for (auto& r : open)
    if (!r->done) fail(*r, {protocol::serving_errc::shutting_down, "gateway shutting down"});
}

uint16_t gateway_service::http_port() const {
  return http_ ? http_->port() : 0;
}

std::string gateway_service::public_address() const {
  return "http://" + config_.http_host + ":" + std::to_string(http_port());
}

size_t gateway_service::live_requests() const {
  std::lock_guard lock(mutex_);
  return live_.size();
}

std::string gateway_service::scheduler() const {
  for (auto& s : instances_with_role(out_->cluster(), "scheduler"))
    if (out_->is_alive(s)) return s;
  return {};
}

void gateway_service::handle(std::shared_ptr<http_exchange> ex, http_request req) {
  const auto path = req.target.substr(0, req.target.find('?'));
  auto not_allowed = [&] {
    ex->respond(405, json_type,
                error_body(api_error(405, "method " + req.method + " not allowed on " + path)));
  };
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (req.method != "POST") return not_allowed();
    return handle_completion(ex, req,
                             path == "/v1/completions" ? api_kind::completion : api_kind::chat);
  }
  if (path == "/v1/models") {
    if (req.method != "GET") return not_allowed();
    return ex->respond(200, json_type,
                       models_response({{model_id_, created_, "supernode", context_limit_}}));
  }
  if (path == "/health") {
    if (req.method != "GET") return not_allowed();
    bool decode_alive = false;
    for (auto& d : instances_with_role(out_->cluster(), "decode"))
      decode_alive |= out_->is_alive(d);
    const bool ok = !scheduler().empty() && decode_alive;
    return ex->respond(ok ? 200 : 503, json_type,
                       nlohmann::json{{"status", ok ? "ok" : "unavailable"}}.dump());
  }
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

void gateway_service::handle_completion(std::shared_ptr<http_exchange> ex, const http_request& req,
                                        api_kind kind) {
  const auto label = endpoint_label(kind);
  auto refuse = [&](const api_error& e) {
    count_request(label, std::to_string(e.status));
    ex->respond(e.status, json_type, error_body(e));
  };
  auto r = std::make_shared<live_request>();
  try {
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
                          "This model's maximum context length is " +
                              std::to_string(context_limit_) + " tokens; the prompt has " +
                              std::to_string(prompt) + " tokens"},
                         kind == api_kind::chat ? "messages" : "prompt");
    int64_t max_tokens = r->api.max_tokens.value_or(
        kind == api_kind::chat ? context_limit_ - prompt : config_.default_max_tokens);
    if (prompt + max_tokens > context_limit_)
      throw to_api_error({serving_errc::context_length_exceeded,
                          "This model's maximum context length is " +
                              std::to_string(context_limit_) + " tokens. However, you requested " +
                              std::to_string(prompt + max_tokens) + " tokens (" +
                              std::to_string(prompt) + " in the prompt, " +
                              std::to_string(max_tokens) + " in the completion)"},
                         "max_tokens");
    r->api.max_tokens = static_cast<int32_t>(max_tokens);
  } catch (const api_error& e) {
    return refuse(e);
  }

  protocol::admit_request admit;
  admit.spec.prompt = r->prompt;
  admit.spec.max_tokens = *r->api.max_tokens;
  admit.spec.temperature = r->api.temperature;
  admit.spec.top_p = r->api.top_p;
  admit.spec.top_k = r->api.top_k;
  admit.spec.seed = r->api.seed ? *r->api.seed : std::random_device{}();
  admit.spec.stop_at_eos = !r->api.ignore_eos;
  r->kind = kind;
  r->ex = ex;
  r->text = std::make_unique<text_stream>(r->api.stop);
  r->arrived = clock::now();
  r->meta.created = unix_seconds();
  r->meta.model = model_id_;
  r->meta.prompt_tokens = static_cast<int64_t>(r->prompt.size());

  const auto target = scheduler();
  {
    std::lock_guard lock(mutex_);
    if (static_cast<int64_t>(live_.size()) >= config_.max_pending)
      return refuse(
          to_api_error({protocol::serving_errc::too_many_requests,
                        "too many requests in flight (" + std::to_string(live_.size()) + ")"}));
    if (target.empty())
      return refuse(to_api_error({protocol::serving_errc::no_scheduler, "no scheduler is alive"}));
    r->id = next_id_++;
    r->meta.id = (kind == api_kind::chat ? "chatcmpl-" : "cmpl-") + out_->self() + "-" +
                 std::to_string(r->id);
    admit.key = request_key{out_->self(), r->id};
    live_[r->id] = r;
  }
  if (r->api.stream && kind == api_kind::chat)
    ex->send_event(stream_chunk(kind, r->meta, "", nullptr, true));
  // The disconnect handler may run at once (client already gone): set it after registering.
  std::weak_ptr<live_request> weak = r;
  ex->set_disconnect_handler([this, weak] {
    auto r = weak.lock();
    if (!r) return;
    std::lock_guard lock(mutex_);
    if (r->done) return;
    r->done = true;
    live_.erase(r->id);
    cancel_upstream(*r, "client disconnected");
    count_request(endpoint_label(r->kind), "disconnected");
  });
  const auto status = out_->send("control", target, transport::make_envelope(std::move(admit)));
  if (status != transport::send_status::ok) {
    std::lock_guard lock(mutex_);
    if (!r->done)
      fail(*r, {protocol::errc_of(status),
                std::string("cannot reach the scheduler: ") + transport::to_string(status)});
  }
}

void gateway_service::cancel_upstream(const live_request& r, const std::string& why) {
  if (!out_) return;
  const request_key key{out_->self(), r.id};
  auto msg = transport::make_envelope(
      protocol::cancel_request{key, {protocol::serving_errc::cancelled, why}});
  // Placed: the decode instance owns it. Not yet (or the placement is still on its way): the
  // scheduler removes it from its queue or forwards the cancel to the decode instance.
  if (r.placed())
    out_->send("control", r.decode, msg);
  else if (auto s = scheduler(); !s.empty())
    out_->send("control", s, msg);
}

void gateway_service::on(const transport::peer_id&, const protocol::token_batch& b,
                         transport::endpoint&) {
  std::lock_guard lock(mutex_);
  for (auto& u : b.updates) {
    auto it = live_.find(u.key.id);
    if (it == live_.end()) continue; // finished or cancelled here already
    auto r = it->second;             // finish() drops the map's reference
    apply_update(*r, u);
  }
}

void gateway_service::on(const transport::peer_id&, const protocol::request_placed& p,
                         transport::endpoint&) {
  std::lock_guard lock(mutex_);
  if (auto it = live_.find(p.key.id); it != live_.end()) {
    it->second->decode = p.decode;
    it->second->prefill = p.prefill;
  }
}

void gateway_service::on(const transport::peer_id&, const protocol::admit_rejected& rej,
                         transport::endpoint&) {
  std::lock_guard lock(mutex_);
  if (auto it = live_.find(rej.key.id); it != live_.end()) {
    auto r = it->second; // fail() drops the map's reference
    fail(*r, rej.why);
  }
}

void gateway_service::on(const transport::peer_id&, const protocol::cluster_stats& s,
                         transport::endpoint&) {
  std::lock_guard lock(mutex_);
  stats_ = s;
}

void gateway_service::apply_update(live_request& r, const protocol::token_update& u) {
  const bool stream = r.api.stream;
  const auto now = clock::now();
  for (size_t i = 0; i < u.tokens.size() && !r.done; ++i) {
    const int32_t token = u.tokens[i];
    if (r.tokens.empty()) {
      r.first_token = now;
      const double ttft = std::chrono::duration<double>(now - r.arrived).count();
      metrics_.observe("supernode_ttft_seconds", "Time to first token", latency_buckets_seconds,
                       ttft);
    } else {
      const double itl = std::chrono::duration<double>(now - r.last_token).count();
      metrics_.observe("supernode_itl_seconds", "Time between tokens of a request",
                       latency_buckets_seconds, itl);
    }
    r.last_token = now;
    r.tokens.push_back(token);
    std::string piece = r.text->feed(token_text(token));
    const bool last = i + 1 == u.tokens.size();
    std::string finish_reason;
    if (r.text->stopped())
      finish_reason = "stop";
    else if (last && (u.finish == protocol::finish_reason::stop ||
                      u.finish == protocol::finish_reason::length))
      finish_reason = protocol::to_string(u.finish);
    if (!finish_reason.empty() && !r.text->stopped()) piece += r.text->finish();
    r.meta.text += piece;
    if (stream) {
      r.meta.completion_tokens = static_cast<int64_t>(r.tokens.size());
      if (r.api.return_token_ids) r.meta.token_ids = std::vector<int32_t>{token};
      r.ex->send_event(
          stream_chunk(r.kind, r.meta, piece, finish_reason.empty() ? nullptr : &finish_reason));
    }
    if (!finish_reason.empty()) {
      if (r.text->stopped()) cancel_upstream(r, "stop string matched");
      finish(r, finish_reason);
    }
  }
  if (!r.done && u.finish != protocol::finish_reason::none) {
    if (u.finish == protocol::finish_reason::error ||
        u.finish == protocol::finish_reason::cancelled)
      fail(r, u.failure.ok() ? protocol::error{protocol::serving_errc::internal,
                                               "request ended without a reason"}
                             : u.failure);
    else
      finish(r, protocol::to_string(u.finish));
  }
}

void gateway_service::count_request(const std::string& endpoint, const std::string& status) {
  metrics_.add_counter("supernode_requests_total", "Requests by endpoint and outcome", 1,
                       {{"endpoint", endpoint}, {"status", status}});
}

std::string gateway_service::token_text(int32_t token) const {
  return tokenizer_.decode(std::span(&token, 1), /*skip_special=*/true, /*skip_unknown=*/true);
}

void gateway_service::fail(live_request& r, const protocol::error& why) {
  r.done = true;
  r.meta.finish_reason = "error";
  r.meta.completion_tokens = static_cast<int64_t>(r.tokens.size());
  const api_error e = to_api_error(why);
  if (r.api.stream && r.ex->finished() == false) {
    r.ex->send_event(error_body(e));
    r.ex->end_stream();
  } else {
    r.ex->respond(e.status, json_type, error_body(e));
  }
  count_request(endpoint_label(r.kind), std::to_string(e.status));
  live_.erase(r.id);
}

void gateway_service::finish(live_request& r, const std::string& finish_reason) {
  r.done = true;
  const auto label = endpoint_label(r.kind);
  r.meta.finish_reason = finish_reason;
  r.meta.completion_tokens = static_cast<int64_t>(r.tokens.size());
  {
    const auto now = clock::now();
    metrics_.observe("supernode_e2e_seconds", "Request latency, arrival to last token",
                     latency_buckets_seconds,
                     std::chrono::duration<double>(now - r.arrived).count());
    if (r.tokens.size() > 1)
      metrics_.observe("supernode_tpot_seconds", "Time per output token after the first",
                       latency_buckets_seconds,
                       std::chrono::duration<double>(r.last_token - r.first_token).count() /
                           static_cast<double>(r.tokens.size() - 1));
    metrics_.add_counter("supernode_generated_tokens_total", "Tokens generated",
                         static_cast<double>(r.tokens.size()));
    metrics_.add_counter("supernode_prompt_tokens_total", "Prompt tokens admitted",
                         static_cast<double>(r.prompt.size()));
    if (r.api.stream) {
      r.meta.token_ids.reset();
      if (r.api.include_usage) r.ex->send_event(usage_chunk(r.kind, r.meta));
      r.ex->send_event(std::string(stream_done));
      r.ex->end_stream();
    } else {
      if (r.api.return_token_ids) r.meta.token_ids = r.tokens;
      r.ex->respond(200, json_type, completion_response(r.kind, r.meta));
    }
  }
  count_request(label, "200");
  live_.erase(r.id);
}

void gateway_service::on_member_event(const transport::membership_event& event,
                                      transport::endpoint& out) {
  (void)out;
  if (event.what == transport::membership_event::kind::joined) return;
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<live_request>> lost;
  const bool no_scheduler = out_ && scheduler().empty();
  for (auto& [id, r] : live_)
    if (r->placed() ? r->decode == event.peer || r->prefill == event.peer : no_scheduler)
      lost.push_back(r);
  for (auto& r : lost)
    fail(*r,
         {protocol::serving_errc::instance_down, event.peer + " went down (" + event.reason + ")"});
}

std::string gateway_service::render_metrics() {
  gateway::cluster_snapshot snap;
  {
    std::lock_guard lock(mutex_);
    snap.stats = stats_;
    snap.gateway_requests_in_flight = live_.size();
  }
  if (out_) {
    snap.gateway = out_->self();
    snap.gateway_planes = plane_traffic_of(*out_);
    snap.gateway_unexpected = out_->unexpected_messages();
  }
  gateway::render_cluster_metrics(metrics_, snap);
  return metrics_.render();
}

} // namespace supernode::services
