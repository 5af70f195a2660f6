#pragma once
// The MP controller role (§4.4.1): owns the ring over the MP servers and changes it as servers
// come up (their first ring request), leave or die (membership events), pushing every new version
// to the servers and to every client that ever asked for it; splits each namespace's pool quota
// over the servers; and keeps the model registry — which blocks make which model version, who is
// fetching a model now (one fetch for N instances starting together), and which models to evict,
// whole and least recently used first, when the model namespace outgrows its quota.
// Nothing of it is persisted: a restarted controller rebuilds it from the servers' reports (see
// mp_server) — the ring from the servers that report, each namespace's usage from their totals,
// and the model index from the manifests they hold. Until every configured server is back on
// its ring, or settle_ticks passed, it pushes its ring to the servers only, so clients keep the
// ring they have rather than take a partial one.
// Once settled, the ring changes in two phases (issue 15): a server that joins (its first ring
// request) or leaves (its drain asks to) makes a target ring, sent to the servers only; each
// hands the blocks whose owners the change moves to their new owners and says so; then — or
// when handover_timeout_ms has passed — the target is published to everyone. Clients read with
// the ring they have meanwhile, so reads hit the old owners until their blocks have moved.
// Changes asked for during one wait for it and go together in the next. A server that dies is
// taken off at once (its blocks are lost to the cache; there is nobody to hand them over).

#include "services/ems/ems_config.hpp"
#include "services/ems/hash_ring.hpp"
#include "services/ems/mp_controller_interface.hpp"
#include "services/protocol/ems_messages.hpp"
#include "services/role_logic.hpp"
#include "transport/shared_bytes.hpp"

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace supernode::services::ems {

class mp_controller : public role_logic {
public:
  using interface = mp_controller_interface;
  mp_controller(const transport::cluster_config& cluster, const ems_config& config);

  void start(transport::endpoint& out) override;
  void on(const transport::peer_id& from, const protocol::ems_ring_request& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::ems_model_claim& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::ems_model_register& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::ems_server_report& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::ems_handover_done& m,
          transport::endpoint& out);
  // Reports to the scheduler like the other roles (its unexpected messages reach /metrics).
  void on_tick(transport::endpoint& out) override;
  void on_member_event(const transport::membership_event& event, transport::endpoint& out) override;

  const hash_ring& ring() const { return ring_; }
  // True once the ring reaches clients (every configured server on it, or settle_ticks passed).
  bool settled() const { return settled_; }
  // The ring being handed over to, while a change runs.
  std::optional<std::vector<std::string>> target_servers() const;
  // What the servers reported, summed per namespace (bytes count every copy).
  std::map<std::string, protocol::ems_namespace_usage> namespace_usage() const;
  struct model_index_entry {
    std::string ns;
    std::vector<std::string> block_keys;
    uint64_t bytes = 0;
    bool operator==(const model_index_entry&) const = default;
  };
  // The ready models: model key -> what makes it.
  std::map<std::string, model_index_entry> model_index() const;

  static constexpr int settle_ticks = 10;
  // A running change's target goes again to the servers that have not answered it, this often:
  // a target sent as a server restarted can land on its old connection and be lost.
  static constexpr int target_resend_ticks = 10;
  // A round in which blocks did not reach their new owner (not reachable yet: a restarted
  // server whose new incarnation the sender has not heard of) is planned again after 1, 2, 4,
  // then every 8 ticks, until handover_timeout_ms. Blocks an owner refused are not retried.
  static constexpr int max_retry_ticks = 8;

private:
  struct waiter {
    transport::peer_id peer;
    uint64_t request_id = 0;
  };
  struct model_entry {
    bool ready = false;
    transport::peer_id fetcher; // while !ready
    std::deque<waiter> waiting;
    std::string ns;
    std::vector<std::string> block_keys;
    uint64_t bytes = 0;
    transport::shared_bytes manifest;
    uint64_t last_used = 0; // a logical clock: claims and registrations
  };

  // A ring change being handed over: the target, and the servers yet to say they are done.
  struct ring_change {
    hash_ring target;
    uint64_t version = 0;
    std::set<transport::peer_id> waiting;
    uint64_t blocks_moved = 0; // over every round
    std::chrono::steady_clock::time_point started;
    // This round's failures (those that never reached their owner apart), the rounds planned
    // again for them, and the ticks until the next.
    uint64_t round_failed = 0, round_unreachable = 0;
    int retries = 0, retry_in_ticks = 0;
  };

  // The ring as clients and servers see it; its version counts up across controller restarts.
  protocol::ems_ring_view ring_view() const;
  void push_ring(transport::endpoint& out);
  void add_server(const transport::peer_id& server, const std::string& why,
                  transport::endpoint& out);
  void settle(transport::endpoint& out);
  bool is_server(const transport::peer_id& peer, transport::endpoint& out) const;
  // A server that is up and not on the ring: on at once while the pool starts, by a change once
  // it has settled.
  void server_up(const transport::peer_id& server, const std::string& why,
                 transport::endpoint& out);
  // Starts the change the joins and leaves asked for make, when none runs.
  void begin_change(transport::endpoint& out);
  // To every server the change waits for (a restarted one too, on the next resend).
  void send_target(transport::endpoint& out);
  // Every server of both rings plans the change again, under a new version.
  void plan_again(transport::endpoint& out);
  // The round is over: published, or planned again when blocks did not reach their owner.
  void round_done(transport::endpoint& out);
  // Publishes the change's target: what the servers handed over, or all there is past the timeout.
  void finish_change(transport::endpoint& out, bool timed_out);
  // Marks `m` ready with what makes it and wakes its waiters.
  void make_ready(transport::endpoint& out, model_entry& m, const std::string& ns,
                  std::vector<std::string> block_keys, uint64_t bytes,
                  transport::shared_bytes manifest);
  // Copies of a block the pool keeps: [ems] replicas, at most one per server.
  uint64_t copies() const;
  void answer_claim(transport::endpoint& out, const waiter& w, const model_entry& m);
  // The claim passes to the next waiter (the fetcher failed or died); none left: forgotten.
  void pass_claim(transport::endpoint& out, const std::string& model_key);
  // Least recently used ready models of `ns` go, whole, until the namespace fits its quota.
  std::vector<std::string> evict_models(transport::endpoint& out, const std::string& ns,
                                        const std::string& keep);

  ems_config config_;
  std::set<std::string> configured_servers_;
  hash_ring ring_;
  std::set<transport::peer_id> subscribers_;
  bool settled_ = false; // clients get the pushes
  uint64_t version_ = 0; // of the last ring or target made (plus epoch_ on the wire)
  // Of ring_ as pushed. A running change's target is numbered ahead of it, and a view must
  // never carry that number: a server takes a view's version as published, and would drop
  // the target it had not yet received as a change already over.
  uint64_t ring_version_ = 0;
  std::optional<ring_change> change_;
  std::set<transport::peer_id> joining_, leaving_; // asked for, in no change yet
  // Servers that asked to leave, until they are gone: their reports do not bring them back.
  std::set<transport::peer_id> departing_;
  int ticks_ = 0;
  std::map<transport::peer_id, std::vector<protocol::ems_namespace_usage>> usage_; // by server
  std::map<std::string, model_entry> models_;
  uint64_t clock_ = 0;
  uint64_t epoch_ = 0; // start time: views of a restarted controller are newer
};

} // namespace supernode::services::ems
