#include "services/gateway/request_tracker.hpp"

#include "services/gateway/error_mapping.hpp"

#include <random>

namespace supernode::services::gateway {

namespace {
constexpr const char* json_type = "application/json";
}

std::string endpoint_label(api_kind kind) {
  return kind == api_kind::chat ? "/v1/chat/completions" : "/v1/completions";
}

namespace {
uint64_t random_id_prefix() {
  std::random_device rd;
  return (uint64_t{rd()} | 1u) << 32; // never 0: 0 is no request
}
} // namespace

request_tracker::request_tracker(metrics_registry& metrics, int64_t max_in_flight, upstream up,
                                 recovery_bounds limits)
    : metrics_(metrics), max_in_flight_(max_in_flight), up_(std::move(up)), bounds_(limits),
      next_id_(random_id_prefix()) {}

request_tracker::~request_tracker() {
  stop({protocol::serving_errc::shutting_down, "gateway shutting down"});
}

bool request_tracker::reserve() {
  if (in_flight_.fetch_add(1) < max_in_flight_) return true;
  --in_flight_;
  return false;
}

void request_tracker::unreserve() {
  --in_flight_;
}

void count_api_key_request(metrics_registry& metrics, const std::string& key_name,
                           const std::string& status) {
  metrics.add_counter("supernode_api_key_requests_total", "Requests by API key name and outcome", 1,
                      {{"key", key_name}, {"status", status}});
}

void request_tracker::count_request(const std::string& endpoint, const std::string& status) {
  metrics_.add_counter("supernode_requests_total", "Requests by endpoint and outcome", 1,
                       {{"endpoint", endpoint}, {"status", status}});
}

void request_tracker::count_end(const tracked_request& r, const std::string& status) {
  count_request(endpoint_label(r.kind), status);
  if (!r.key_name.empty()) count_api_key_request(metrics_, r.key_name, status);
}

void request_tracker::admit(std::shared_ptr<tracked_request> r, protocol::admit_request message) {
  thread_.post([this, r = std::move(r), message = std::move(message)] {
    r->cluster_id = message.key.id;
    r->admission = std::move(message);
    live_[r->cluster_id] = r;
    cluster_id_of_[r->id] = r->cluster_id;
    send_admission(*r);
  });
}

void request_tracker::send_admission(tracked_request& r) {
  r.last_progress = clock::now(); // this attempt's bounds start now
  const auto status = up_.admit(r.admission);
  if (status != transport::send_status::ok && !r.done)
    recover(r, {protocol::errc_of(status),
                std::string("cannot reach the scheduler: ") + transport::to_string(status)});
}

void request_tracker::recover(tracked_request& r, const protocol::error& why) {
  if (r.done) return;
  const auto now = clock::now();
  // A full admission queue on the first try is back-pressure: the client hears it at once.
  const bool retryable =
      why.retry_elsewhere() && !(why.is(protocol::serving_errc::queue_full) && r.attempts == 1);
  if (bounds_.recovery.count() == 0 || !retryable) return fail(r, why);
  if (!r.recovering_since) r.recovering_since = now;
  if (now - *r.recovering_since >= bounds_.recovery)
    return fail(r, {why.code, why.message + " (not recovered within " +
                                  std::to_string(bounds_.recovery.count()) + " ms)"});
  auto self = live_.at(r.cluster_id); // r stays alive while it is re-keyed
  // A sequence its draining decode instance hands on keeps its KV there, under the old key, for
  // the next instance to fetch: that attempt is not cancelled. Any other failure recomputes.
  const bool moves = why.is(protocol::serving_errc::sequence_moved) && !r.decode.empty();
  r.admission.moved = moves ? protocol::moved_kv{r.decode, r.admission.key} : protocol::moved_kv{};
  if (r.placed() && !moves) up_.cancel(r, "placed again: " + why.message); // the old attempt
  live_.erase(r.cluster_id);
  r.cluster_id = next_id_++;
  live_[r.cluster_id] = self;
  cluster_id_of_[r.id] = r.cluster_id;
  r.decode.clear();
  r.prefill.clear();
  r.before_placement.clear();
  r.admission.key.id = r.cluster_id;
  r.admission.spec.generated = r.tokens;
  ++r.attempts;
  metrics_.add_counter("supernode_requests_resumed_total",
                       "Requests placed again after their instance died, hung or failed", 1,
                       {{"reason", why.name()}});
  log_.for_request(r.meta.id).info("placing again (attempt {}, {} tokens streamed): {}", r.attempts,
                                   r.tokens.size(), why.str());
  // The first retry goes at once (another instance is usually alive); later ones back off, so
  // a cluster waiting for a restart is not flooded.
  const auto backoff = r.attempts == 2
                           ? std::chrono::milliseconds(0)
                           : std::min(std::chrono::milliseconds(100 << std::min(r.attempts - 3, 5)),
                                      std::chrono::milliseconds(2000));
  if (backoff.count() == 0) return send_admission(r);
  r.retry_at = now + backoff;
}

std::chrono::milliseconds request_tracker::first_token_bound(const tracked_request& r) const {
  // An attempt that follows a failure gets half the recovery window at most: a message lost to
  // a peer that restarted must leave time for one more attempt before the window closes.
  if (r.recovering_since && bounds_.recovery.count() > 0)
    return std::min(bounds_.first_token, bounds_.recovery / 2);
  return bounds_.first_token;
}

void request_tracker::tick() {
  thread_.post([this] {
    const auto now = clock::now();
    std::vector<std::shared_ptr<tracked_request>> due;
    std::vector<std::pair<std::shared_ptr<tracked_request>, std::string>> stalled;
    for (auto& [id, r] : live_) {
      if (r->retry_at) {
        if (*r->retry_at <= now) due.push_back(r);
      } else if (r->placed() && r->tokens.size() > r->admission.spec.generated.size()) {
        // Streaming in this attempt.
        if (now - r->last_progress > bounds_.stall)
          stalled.emplace_back(r, "nothing from " + r->decode + " for " +
                                      std::to_string(bounds_.stall.count()) + " ms");
      } else if (const auto bound = first_token_bound(*r); now - r->last_progress > bound) {
        // This attempt's admission, placement, prefill or first token never came.
        stalled.emplace_back(r, std::string(r->placed() ? "placed" : "not placed") +
                                    " and no token of this attempt for " +
                                    std::to_string(bound.count()) + " ms");
      }
    }
    for (auto& r : due) {
      r->retry_at.reset();
      send_admission(*r);
    }
    for (auto& [r, why] : stalled) recover(*r, {protocol::serving_errc::delivery_failed, why});
  });
}

void request_tracker::client_gone(uint64_t id) {
  thread_.post([this, id] {
    auto c = cluster_id_of_.find(id);
    if (c == cluster_id_of_.end()) return; // it ended first
    auto r = live_.at(c->second);
    r->done = true;
    up_.cancel(*r, "client disconnected");
    count_end(*r, "disconnected");
    forget(*r);
  });
}

void request_tracker::tokens(std::string from, std::shared_ptr<const protocol::token_batch> batch) {
  thread_.post([this, from = std::move(from), batch = std::move(batch)] {
    for (auto& u : batch->updates) {
      auto it = live_.find(u.key.id);
      if (it == live_.end()) continue; // finished or cancelled here already
      auto r = it->second;             // finish() drops the map's reference
      if (r->placed()) {
        apply_update_from(from, *r, u);
      } else if (r->before_placement.size() < max_updates_before_placement) {
        r->before_placement.emplace_back(from, u);
      } else {
        up_.reject(from, "updates_before_placement",
                   "more token updates than a request can have before its placement");
      }
    }
  });
}

void request_tracker::apply_update_from(const std::string& from, tracked_request& r,
                                        const protocol::token_update& u) {
  if (from == r.decode) return apply_update(r, u);
  up_.reject(from, "not_from_placed_decode",
             "tokens for request " + std::to_string(r.id) + ", which is placed on " + r.decode);
}

void request_tracker::placed(protocol::request_placed p) {
  thread_.post([this, p = std::move(p)] {
    auto it = live_.find(p.key.id);
    if (it == live_.end()) return;
    auto r = it->second; // an early update may finish it
    r->decode = p.decode;
    r->prefill = p.prefill;
    r->last_progress = clock::now();
    if (up_.alive && !up_.alive(p.decode))
      return recover(
          *r, {protocol::serving_errc::instance_down, "placed on " + p.decode + ", which is down"});
    auto early = std::move(r->before_placement);
    for (auto& [from, u] : early)
      if (!r->done) apply_update_from(from, *r, u);
  });
}

void request_tracker::rejected(protocol::admit_rejected rej) {
  thread_.post([this, rej = std::move(rej)] {
    if (auto it = live_.find(rej.key.id); it != live_.end()) {
      auto r = it->second; // fail() drops the map's reference
      recover(*r, rej.why);
    }
  });
}

void request_tracker::peer_down(std::string peer, std::string reason, bool no_scheduler) {
  thread_.post([this, peer = std::move(peer), reason = std::move(reason), no_scheduler] {
    std::vector<std::shared_ptr<tracked_request>> lost;
    for (auto& [id, r] : live_) {
      if (r->retry_at) continue; // waiting for its next attempt already
      // A prefill instance matters until the first token: after it, the decode has the KV.
      const bool held = r->placed() ? r->decode == peer || (r->prefill == peer && r->tokens.empty())
                                    : no_scheduler;
      if (held) lost.push_back(r);
    }
    using protocol::serving_errc;
    for (auto& r : lost)
      recover(*r, r->placed()
                      ? protocol::error{serving_errc::instance_down,
                                        peer + " went down (" + reason + ")"}
                      : protocol::error{serving_errc::no_scheduler,
                                        "no scheduler is alive (" + peer + ": " + reason + ")"});
  });
}

void request_tracker::stop(const protocol::error& why) {
  thread_.post([this, why] {
    std::vector<std::shared_ptr<tracked_request>> open;
    for (auto& [id, r] : live_) open.push_back(r);
    for (auto& r : open)
      if (!r->done) fail(*r, why);
  });
  thread_.stop();
}

void request_tracker::apply_update(tracked_request& r, const protocol::token_update& u) {
  const bool stream = r.api.stream;
  const auto now = clock::now();
  const auto have = static_cast<int64_t>(r.tokens.size());
  r.last_progress = now;
  // Updates of one attempt arrive in order; a gap means some were lost on the way: the
  // request goes on from what its client has.
  if (!u.tokens.empty() && u.first_index > have)
    return recover(r, {protocol::serving_errc::delivery_failed,
                       "tokens from index " + std::to_string(u.first_index) +
                           " arrived after only " + std::to_string(have) + ": some were lost"});
  if (r.recovering_since && (!u.tokens.empty() || u.finish != protocol::finish_reason::error)) {
    metrics_.observe("supernode_request_recovery_seconds",
                     "From losing a request's instance to its stream going on",
                     latency_buckets_seconds,
                     std::chrono::duration<double>(now - *r.recovering_since).count());
    r.recovering_since.reset();
  }
  // Each index once: a resumed attempt never repeats what the client has.
  const auto skip = u.tokens.empty() ? 0 : static_cast<size_t>(have - u.first_index);
  for (size_t i = skip; i < u.tokens.size() && !r.done; ++i) {
    const int32_t token = u.tokens[i];
    if (r.tokens.empty()) {
      r.first_token = now;
      const double ttft = std::chrono::duration<double>(now - r.arrived).count();
      metrics_.observe("supernode_ttft_seconds", "Time to first token", latency_buckets_seconds,
                       ttft);
      latencies_.add_ttft(now, ttft * 1e3);
    } else {
      const double itl = std::chrono::duration<double>(now - r.last_token).count();
      metrics_.observe("supernode_itl_seconds", "Time between tokens of a request",
                       latency_buckets_seconds, itl);
    }
    r.last_token = now;
    r.tokens.push_back(token);
    std::string piece = r.text->feed(up_.token_text(token));
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
      if (r.text->stopped()) up_.cancel(r, "stop string matched");
      finish(r, finish_reason);
    }
  }
  if (!r.done && u.finish != protocol::finish_reason::none) {
    if (u.finish == protocol::finish_reason::error ||
        u.finish == protocol::finish_reason::cancelled)
      recover(r, u.failure.ok() ? protocol::error{protocol::serving_errc::internal,
                                                  "request ended without a reason"}
                                : u.failure);
    else
      finish(r, protocol::to_string(u.finish));
  }
}

void request_tracker::fail(tracked_request& r, const protocol::error& why) {
  r.done = true;
  forget(r); // before the client sees the end: its next request must find the slot free
  r.meta.finish_reason = "error";
  r.meta.completion_tokens = static_cast<int64_t>(r.tokens.size());
  log_.for_request(r.meta.id).warn("request failed: {}", why.str());
  const api_error e = to_client_api_error(why, log_.instance());
  if (r.api.stream && r.ex->finished() == false) {
    r.ex->send_event(error_body(e));
    r.ex->end_stream();
  } else {
    r.ex->respond(e.status, json_type, error_body(e));
  }
  count_end(r, std::to_string(e.status));
}

void request_tracker::finish(tracked_request& r, const std::string& finish_reason) {
  r.done = true;
  forget(r); // before the client sees the end: its next request must find the slot free
  r.meta.finish_reason = finish_reason;
  r.meta.completion_tokens = static_cast<int64_t>(r.tokens.size());
  const auto now = clock::now();
  metrics_.observe("supernode_e2e_seconds", "Request latency, arrival to last token",
                   latency_buckets_seconds, std::chrono::duration<double>(now - r.arrived).count());
  if (r.tokens.size() > 1) {
    const double tpot = std::chrono::duration<double>(r.last_token - r.first_token).count() /
                        static_cast<double>(r.tokens.size() - 1);
    metrics_.observe("supernode_tpot_seconds", "Time per output token after the first",
                     latency_buckets_seconds, tpot);
    latencies_.add_tpot(now, tpot * 1e3);
  }
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
  count_end(r, "200");
}

void request_tracker::forget(tracked_request& r) {
  cluster_id_of_.erase(r.id);
  if (live_.erase(r.cluster_id)) --in_flight_;
  r.lease.end(static_cast<int64_t>(r.tokens.size()));
}

} // namespace supernode::services::gateway
