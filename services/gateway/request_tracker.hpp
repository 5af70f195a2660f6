#pragma once
// Every request a gateway serves, from admission to its last byte, owned by one thread: the
// tracker's. The HTTP front (a parsed, validated request; a client gone) and the role's
// handlers (tokens, placements, refusals, instances down) post events here and return at once;
// nothing else reads or writes a request's state, so there is no lock around it. Only the
// in-flight count (the HTTP front's admission limit, /metrics) is shared, as an atomic.

#include "services/gateway/http_server.hpp"
#include "services/gateway/metrics.hpp"
#include "services/gateway/openai_api.hpp"
#include "services/gateway/stop_matcher.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/serving/serial_executor.hpp"
#include "transport/plane.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace supernode::services::gateway {

// One request as the gateway follows it.
struct tracked_request {
  using clock = std::chrono::steady_clock;
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
  // Updates that came before the placement did (the decode instance hears of the request first),
  // with their senders: applied once the placement names the decode instance, refused otherwise.
  std::vector<std::pair<std::string, protocol::token_update>> before_placement;
  clock::time_point arrived, first_token, last_token;
  completion_result meta;
};

// "/v1/completions" or "/v1/chat/completions": the endpoint label of requests_total.
std::string endpoint_label(api_kind kind);

class request_tracker {
public:
  // How the tracker reaches the cluster, and what it needs to render text. Called on the
  // tracker's thread.
  struct upstream {
    std::function<transport::send_status(const protocol::admit_request&)> admit;
    // Tells wherever the request is (its decode instance, else the scheduler) to drop it.
    std::function<void(const tracked_request&, const std::string& why)> cancel;
    std::function<std::string(int32_t token)> token_text;
    // A message refused for its sender (endpoint::reject).
    std::function<void(const std::string& from, const std::string& reason,
                       const std::string& detail)>
        reject;
  };
  // Updates held per request until its placement arrives; more are refused.
  static constexpr size_t max_updates_before_placement = 256;
  request_tracker(metrics_registry& metrics, int64_t max_in_flight, upstream up);
  ~request_tracker();

  // HTTP front, before posting: a slot for one more request (false: the limit is reached) and
  // its id. A reserved slot is given back by whatever ends the request. Ids start at a random
  // 32-bit prefix of this gateway's (a peer cannot guess another gateway's ids) and count up.
  bool reserve();
  void unreserve();
  uint64_t next_id() { return next_id_++; }
  size_t in_flight() const { return in_flight_.load(); }

  // Events, from any thread; each runs on the tracker's thread in the order posted.
  void admit(std::shared_ptr<tracked_request> r, protocol::admit_request message);
  void client_gone(uint64_t id);
  // Tokens from `from`: applied only to requests placed on `from`.
  void tokens(std::string from, std::shared_ptr<const protocol::token_batch> batch);
  void placed(protocol::request_placed placement);
  void rejected(protocol::admit_rejected rejection);
  // `peer` left or died; with `no_scheduler`, requests not yet placed have nobody either.
  void peer_down(std::string peer, std::string reason, bool no_scheduler);
  // Ends every open request with `why` and stops the thread.
  void stop(const protocol::error& why);

  void count_request(const std::string& endpoint, const std::string& status);

private:
  using clock = tracked_request::clock;
  void apply_update(tracked_request& r, const protocol::token_update& u);
  // Applies `u` when `from` is the decode instance `r` is placed on; refuses it otherwise.
  void apply_update_from(const std::string& from, tracked_request& r,
                         const protocol::token_update& u);
  void finish(tracked_request& r, const std::string& finish_reason);
  void fail(tracked_request& r, const protocol::error& why);
  void forget(tracked_request& r); // ends its life here: out of live_, its slot given back

  metrics_registry& metrics_;
  const int64_t max_in_flight_;
  upstream up_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> next_id_;
  // The tracker thread's.
  std::map<uint64_t, std::shared_ptr<tracked_request>> live_;
  serial_executor thread_; // last: stops before the state its tasks use goes
};

} // namespace supernode::services::gateway
