#pragma once
// The gateway role: the OpenAI-compatible HTTP front (completions and chat, streamed or not,
// models, health, metrics). It tokenizes, validates against the model's limits, admits each
// request at the scheduler and follows it to its end: tokens from the decode instance become
// text (UTF-8 whole, stop strings cut), usage and latency metrics. A client that goes away
// cancels its request wherever it is, so its KV blocks are freed.

#include "model/config.hpp"
#include "model/tokenizer.hpp"
#include "services/gateway/gateway_interface.hpp"
#include "services/gateway/http_server.hpp"
#include "services/gateway/metrics.hpp"
#include "services/gateway/openai_api.hpp"
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
  void on(const transport::peer_id& from, const protocol::token_batch& m, transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::request_placed& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::admit_rejected& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::cluster_stats& m,
          transport::endpoint& out);
  void on_member_event(const transport::membership_event& event, transport::endpoint& out) override;

  std::string public_address() const override;
  uint16_t http_port() const;
  size_t live_requests() const;

private:
  using clock = std::chrono::steady_clock;
  struct live_request;

  void handle(std::shared_ptr<gateway::http_exchange> ex, gateway::http_request req);
  void handle_completion(std::shared_ptr<gateway::http_exchange> ex,
                         const gateway::http_request& req, gateway::api_kind kind);
  std::vector<int32_t> prompt_tokens(const gateway::completion_request& api) const;
  std::string render_metrics();

  // Called with mutex_ held: turns one update into stream events or the final response.
  void apply_update(live_request& r, const protocol::token_update& u);
  // Ends a request: answers the client (unless gone) and records the outcome.
  void finish(live_request& r, const std::string& finish_reason);
  void fail(live_request& r, const protocol::error& why);
  void cancel_upstream(const live_request& r, const std::string& why);
  std::string token_text(int32_t token) const;
  void count_request(const std::string& endpoint, const std::string& status);
  std::string scheduler() const;

  serving_config config_;
  model::model_config model_config_;
  model::tokenizer tokenizer_;
  int64_t context_limit_;
  std::string model_id_;
  int64_t created_;
  std::unique_ptr<gateway::http_server> http_;
  transport::endpoint* out_ = nullptr;
  gateway::metrics_registry metrics_;

  mutable std::mutex mutex_;
  std::map<uint64_t, std::shared_ptr<live_request>> live_;
  uint64_t next_id_ = 1;
  protocol::cluster_stats stats_;
};

} // namespace supernode::services
