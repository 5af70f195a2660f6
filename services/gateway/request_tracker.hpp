#pragma once
// Every request a gateway serves, from admission to its last byte, owned by one thread: the
// tracker's. The HTTP front (a parsed, validated request; a client gone) and the role's
// handlers (tokens, placements, refusals, instances down) post events here and return at once;
// nothing else reads or writes a request's state, so there is no lock around it. Only the
// in-flight count (the HTTP front's admission limit, /metrics) is shared, as an atomic.

#include "log/log.hpp"
#include "services/gateway/http_server.hpp"
#include "services/gateway/key_limiter.hpp"
#include "services/gateway/latency_window.hpp"
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
#include <optional>
#include <string>
#include <vector>

namespace supernode::services::gateway {

// One request as the gateway follows it. The gateway is where a request's recovery state lives:
// its admission (prompt, sampling parameters, seed) and the tokens its client has. When the
// instance holding it dies, hangs past the liveness bound or fails with a retryable code, the
// request is admitted again under a fresh cluster id with those tokens as spec.generated, and
// continues where its stream stopped (decode_batch::resume): stale messages of the old attempt
// name an id nobody has any more.
struct tracked_request {
  using clock = std::chrono::steady_clock;
  uint64_t id = 0;         // the client's: its completion id, its disconnect handler
  uint64_t cluster_id = 0; // the current attempt's key id at the scheduler and instances
  api_kind kind = api_kind::completion;
  completion_request api;
  std::shared_ptr<http_exchange> ex;
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;
  std::unique_ptr<text_stream> text;
  std::string decode, prefill; // known once the scheduler placed it
  bool done = false;
  std::string key_name;     // the API key's name, when keys are configured
  key_limiter::lease lease; // the key's slot and token charges, ended with the request
  bool placed() const { return !decode.empty(); }
  protocol::admit_request admission; // what was admitted (generated: as of the last attempt)
  int attempts = 1;
  // Set while it is being placed again: since when, and when the next attempt goes.
  std::optional<clock::time_point> recovering_since, retry_at;
  clock::time_point last_progress; // this attempt admitted, placed, or a token applied
  // Updates that came before the placement did (the decode instance hears of the request first),
  // with their senders: applied once the placement names the decode instance, refused otherwise.
  std::vector<std::pair<std::string, protocol::token_update>> before_placement;
  clock::time_point arrived, first_token, last_token;
  completion_result meta;
};

// "/v1/completions" or "/v1/chat/completions": the endpoint label of requests_total.
std::string endpoint_label(api_kind kind);

// supernode_api_key_requests_total{key=<name>,status}: by the key's name, never the key.
void count_api_key_request(metrics_registry& metrics, const std::string& key_name,
                           const std::string& status);

// When the tracker gives up waiting and places a request again.
struct recovery_bounds {
  // A request that lost its instance is placed again for up to this long (0: never).
  std::chrono::milliseconds recovery{std::chrono::seconds(30)};
  // A request mid-stream that hears nothing for this long (its tokens lost on the way, its
  // instance stuck without dying) is placed again too.
  std::chrono::milliseconds stall{std::chrono::seconds(15)};
  // So is an attempt without a token this long after its admission or placement (a frame of
  // its admission, placement, prefill or KV lost): longer, since a prompt may queue. An attempt
  // that follows a failure waits half of `recovery` at most, so one more attempt fits.
  std::chrono::milliseconds first_token{std::chrono::seconds(60)};
};

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
    // Whether a member is alive now: a placement on one already known dead is placed again.
    std::function<bool(const std::string& peer)> alive;
  };
  // Updates held per request until its placement arrives; more are refused.
  static constexpr size_t max_updates_before_placement = 256;
  request_tracker(metrics_registry& metrics, int64_t max_in_flight, upstream up,
                  recovery_bounds limits = {});
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
  // `peer` left or died: the requests it held are placed again (a prefill instance's only
  // until their first token). With `no_scheduler`, requests not yet placed wait for one.
  void peer_down(std::string peer, std::string reason, bool no_scheduler);
  // Heartbeat pace: the attempts whose back-off has passed go out, and placed requests that
  // stalled are placed again.
  void tick();
  // Ends every open request with `why` and stops the thread.
  void stop(const protocol::error& why);

  void count_request(const std::string& endpoint, const std::string& status);
  // TTFT (at each first token) and TPOT (at each successful end) of the last minutes, for the
  // planner's p90 over its window.
  const latency_window& latencies() const { return latencies_; }

  // Who the tracker is, in the failures it logs and the errors clients see. Before the first
  // request.
  void set_log(log::logger log) { log_ = std::move(log); }

private:
  void count_end(const tracked_request& r, const std::string& status);
  using clock = tracked_request::clock;
  void apply_update(tracked_request& r, const protocol::token_update& u);
  // Applies `u` when `from` is the decode instance `r` is placed on; refuses it otherwise.
  void apply_update_from(const std::string& from, tracked_request& r,
                         const protocol::token_update& u);
  void finish(tracked_request& r, const std::string& finish_reason);
  void fail(tracked_request& r, const protocol::error& why);
  // Places `r` again after `why`, or fails it when `why` is not retryable or the recovery
  // timeout has passed.
  void recover(tracked_request& r, const protocol::error& why);
  void send_admission(tracked_request& r);
  void forget(tracked_request& r); // ends its life here: out of live_, its slot given back

  metrics_registry& metrics_;
  const int64_t max_in_flight_;
  upstream up_;
  // How long an attempt may go without its first token before it is placed again.
  std::chrono::milliseconds first_token_bound(const tracked_request& r) const;
  const recovery_bounds bounds_;
  log::logger log_;
  std::atomic<int64_t> in_flight_{0};
  latency_window latencies_;
  std::atomic<uint64_t> next_id_;
  // The tracker thread's: by cluster id, and the client's id to the current cluster id.
  std::map<uint64_t, std::shared_ptr<tracked_request>> live_;
  std::map<uint64_t, uint64_t> cluster_id_of_;
  serial_executor thread_; // last: stops before the state its tasks use goes
};

} // namespace supernode::services::gateway
