#pragma once
// The scheduler role (§4.1): an admission queue in arrival order; each request goes to the
// live prefill instance with the fewest outstanding prompt tokens and a live decode instance
// with room for its KV (prompt + max_tokens). No cache affinity. Load is kept as running
// totals — what this scheduler assigned minus what the instance reports completed — so the
// view stays exact however reports and assignments interleave. A decode instance refusing an
// assignment (its own view is the truth) puts the request back at the head of the queue.
// With no prefill instance in the cluster (colocated shape) decode instances prefill themselves.

#include "services/protocol/serving_messages.hpp"
#include "services/role_logic.hpp"
#include "services/scheduler/scheduler_interface.hpp"
#include "services/serving/serving_config.hpp"

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>

namespace supernode::services {

class scheduler_service : public role_logic {
public:
  using interface = scheduler_interface;
  scheduler_service(const serving_config& config, const transport::cluster_config& cluster);

  void on(const transport::peer_id& from, const protocol::admit_request& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::cancel_request& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::decode_assign_result& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::load_report& m, transport::endpoint& out);
  void on_member_event(const transport::membership_event& event, transport::endpoint& out) override;
  void on_tick(transport::endpoint& out) override;

  size_t queued() const { return queue_.size(); }
  size_t placed() const { return placed_.size(); }

private:
  struct prefill_state {
    bool alive = true, reported = false;
    int64_t assigned_tokens = 0, completed_tokens = 0;
    protocol::load_report last;
  };
  struct decode_state {
    bool alive = true, reported = false;
    // When it went down without leaving: it may be back within the liveness window (a process
    // whose first connection closed as it started its roles), so requests wait that long.
    std::optional<std::chrono::steady_clock::time_point> down_since;
    bool refused = false; // refused an assignment: no more until its next report
    int64_t reserved = 0; // blocks this scheduler assigned to it, ever
    protocol::load_report last;
    int64_t capacity() const { return last.kv_blocks_total; }
    int64_t used_blocks() const { return reserved - last.kv_blocks_released; }
    int64_t free_blocks() const { return capacity() - used_blocks(); }
  };
  struct placement {
    std::string prefill, decode;
    int64_t blocks = 0, prompt_tokens = 0;
    protocol::admit_request request; // kept until accepted, to requeue on refusal
    std::chrono::steady_clock::time_point at{};
    bool accepted = false;
  };
  // An assignment that no decode_assign_result answers this long (a message lost to a peer
  // that restarted as it was sent) is taken back and placed again.
  std::chrono::milliseconds assign_timeout() const { return liveness_window_; }
  void take_back_unanswered(transport::endpoint& out);

  void place_queued(transport::endpoint& out);
  void unplace(const protocol::request_key& key, bool requeue);

  serving_config config_;
  std::chrono::milliseconds liveness_window_; // heartbeat interval × missed heartbeats
  bool colocated_;
  std::deque<protocol::admit_request> queue_;
  std::map<std::string, prefill_state> prefills_;
  // Expert shards and MP servers take no requests: their reports only feed the cluster stats
  // (the role is in each report).
  struct shard_state {
    bool alive = true;
    protocol::load_report last;
  };
  std::map<std::string, shard_state> reporters_;
  std::map<std::string, decode_state> decodes_;
  std::map<protocol::request_key, placement> placed_;
};

} // namespace supernode::services
