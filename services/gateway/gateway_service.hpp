#pragma once
// The gateway role: the OpenAI-compatible HTTP front (completions and chat, streamed or not,
// models, health, metrics). It tokenizes, validates against the model's limits, admits each
// request at the scheduler and follows it to its end: tokens from the decode instance become
// text (UTF-8 whole, stop strings cut), usage and latency metrics. A client that goes away
// cancels its request wherever it is, so its KV blocks are freed.
//
// With [gateway] api_keys_file every /v1/* request needs `Authorization: Bearer <key>` (401
// otherwise) and stays within its key's limits (429 with Retry-After); /health and /metrics stay
// open. Without keys the API is open, and the gateway listens on loopback only unless
// allow_unauthenticated says otherwise.

#include "model/config.hpp"
#include "model/tokenizer.hpp"
#include "services/gateway/admin_scale.hpp"
#include "services/gateway/api_keys.hpp"
#include "services/gateway/gateway_interface.hpp"
#include "services/gateway/health.hpp"
#include "services/gateway/http_server.hpp"
#include "services/gateway/key_limiter.hpp"
#include "services/gateway/metrics.hpp"
#include "services/gateway/openai_api.hpp"
#include "services/gateway/planner_runner.hpp"
#include "services/gateway/request_tracker.hpp"
#include "services/gateway/stop_matcher.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/role_logic.hpp"
#include "services/serving/serving_config.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>

namespace supernode::services {

class gateway_service : public role_logic {
public:
  using interface = gateway_interface;
  explicit gateway_service(const serving_config& config);
  ~gateway_service() override;

  void start(transport::endpoint& out) override; // binds the HTTP port (throws naming it)
  void stop() override;
  // Actor thread: each hands the event to the request tracker and returns.
  void on(const transport::peer_id& from, std::shared_ptr<const protocol::token_batch> m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::request_placed& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::admit_rejected& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, std::shared_ptr<const protocol::cluster_stats> m,
          transport::endpoint& out);
  void on_member_event(const transport::membership_event& event, transport::endpoint& out) override;
  void on_tick(transport::endpoint& out) override; // resumed requests' next attempts

  std::string public_address() const override;
  uint16_t http_port() const;
  size_t live_requests() const;

private:
  uint16_t listen_port(const transport::endpoint& out) const;
  // HTTP threads: parse, validate, tokenize, then hand the request to the tracker.
  void handle(std::shared_ptr<gateway::http_exchange> ex, gateway::http_request req);
  void handle_completion(std::shared_ptr<gateway::http_exchange> ex,
                         const gateway::http_request& req, gateway::api_kind kind,
                         const gateway::api_key_entry* key);
  // The key of a /v1/* request: nullptr when none are configured; answers 401 and returns
  // false when keys are configured and the request's is missing or unknown.
  bool authenticate(gateway::http_exchange& ex, const gateway::http_request& req,
                    const gateway::api_key_entry*& key);
  gateway::key_limiter& limiter_of(const gateway::api_key_entry& key);
  // The request as the tracker follows it; throws api_error naming what is wrong.
  std::shared_ptr<gateway::tracked_request> parse_request(const gateway::http_request& req,
                                                          gateway::api_kind kind) const;
  std::vector<int32_t> prompt_tokens(const gateway::completion_request& api) const;
  std::string render_metrics();
  // Every non-gateway instance: alive in this gateway's membership, and why it takes no
  // requests (the scheduler's latest statistics). For /health and /metrics.
  std::vector<gateway::member_health> member_health() const;
  // Tracker thread: reaching the cluster.
  transport::send_status send_admit(const protocol::admit_request& message);
  void cancel_upstream(const gateway::tracked_request& r, const std::string& why);
  std::string token_text(int32_t token) const;
  std::string scheduler() const;
  // gateway-0 with [planner] enabled: the planner on its thread (throws when the topology
  // cannot be planned).
  void start_planner(transport::endpoint& out);
  void send_batch_cap(int64_t cap);

  serving_config config_;
  model::model_config model_config_;
  model::tokenizer tokenizer_;
  int64_t context_limit_;
  std::string model_id_;
  int64_t created_;
  transport::endpoint* out_ = nullptr;
  log::logger log_;
  gateway::api_key_table keys_;
  std::vector<std::unique_ptr<gateway::key_limiter>> limiters_; // keys_.entries()' order
  gateway::metrics_registry metrics_;
  // The scheduler's latest cluster statistics: written by the actor thread, read by /metrics.
  mutable std::mutex stats_mutex_;
  std::shared_ptr<const protocol::cluster_stats> stats_;
  gateway::request_tracker tracker_;
  // The one planner of the cluster, in gateway-0; null elsewhere or with the planner off.
  // Stopped first: its rounds read the tracker and the statistics.
  std::unique_ptr<gateway::planner_runner> planner_;
  // Stopped before http_ (stop()): a scale call still waiting answers nobody.
  std::unique_ptr<gateway::admin_scale> admin_;
  std::unique_ptr<gateway::http_server> http_; // last: its threads stop before the rest goes
};

} // namespace supernode::services
