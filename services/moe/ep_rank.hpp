#pragma once
// An instance's seat in its expert-parallel group: the group's current formation (its fabric
// and the expert_parallel built on it) and the pieces of the compute loop that differ from a
// lone instance: serving peers' forwards while idle, sleeping on the group's doorbell, and
// re-forming the group when its members change.
//
// Re-forming. A member that dies (or is fenced) breaks the formation: ops in progress throw
// ep_failure, the instance rolls its step back (its sequences and their KV stay), and at the
// next step boundary the compute thread forms the group again over the members alive now — a
// new epoch, ranks renumbered, the experts placed over the alive hosts (every rank holds the
// whole model, so a placement is only routing) — and retries the step. A member that comes
// back (a new incarnation) makes the group grow back the same way — over shared memory without
// stopping first: the next formation's regions are made beside the one in service, which goes
// on serving until every rank of the next has made its own (make before break); a rank that
// switches leaves the old formation, so a peer still in it sees it leave, rolls its step back and
// joins the next at once. Every survivor computes the
// formation from its own membership view; a rank whose view differs waits for a region or
// socket of a formation nobody else makes, notices its view change and tries the new one, so
// the group converges once membership has.

#include "services/moe/ep_membership.hpp"
#include "services/moe/expert_parallel.hpp"
#include "services/protocol/serving_messages.hpp"
#include "transport/membership.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace supernode::transport {
class endpoint;
}

namespace supernode::services {

// Who is alive, and in which incarnation, as the group forms: the instance's endpoint in a
// process (ep_rank::watch(endpoint)); tests give their own.
class ep_member_view {
public:
  virtual ~ep_member_view() = default;
  virtual const std::string& self() const = 0;
  virtual uint64_t incarnation() const = 0;
  // Every member known by name: the config's, and those that joined.
  virtual std::vector<std::string> names() const = 0;
  // The incarnation of a live member (0: not heard from yet); nothing when it is not alive.
  virtual std::optional<uint64_t> live_incarnation(const std::string& name) const = 0;
};

// It is also the transformer's routed_experts: until the group is formed, and while it is
// broken, a forward throws ep_failure.
class ep_rank final : public model::routed_experts {
public:
  ep_rank(std::shared_ptr<const model::model_weights> weights, ep_membership membership);
  ~ep_rank() override;

  // The configured group (every member, this instance's configured rank).
  const ep_membership& membership() const { return configured_; }
  // Where the alive members and their incarnations come from: the instance's endpoint, or a
  // view of the test's. Without one, every configured member counts as alive. Before the
  // compute thread starts.
  void watch(const transport::endpoint& out);
  void watch(std::unique_ptr<const ep_member_view> view);

  // Compute thread: forms the group over the members alive now (waiting for their
  // incarnations to be known), replacing any earlier formation. False when `give_up` turns
  // true first, or no formation connected within `patience`; the group is broken then.
  bool form(const std::function<bool()>& give_up,
            std::chrono::milliseconds patience = std::chrono::seconds(10));
  // A member died or came back since the last formation: form() again at a step boundary.
  bool wants_reform() const { return reform_wanted_; }
  // A next formation is being made beside the one in service: look again soon, not at the next
  // doorbell (compute thread).
  bool forming_next() const { return next_fabric_ != nullptr; }
  // The members of the formation made or being made, by rank.
  std::vector<std::string> formation_members() const;

  void forward(int64_t layer, const model::moe_weights& w, const float* x, int64_t rows,
               float* out) override;
  void forward_begins() override;

  // Takes part in a forward a peer started, if any; false when there was none (or the group
  // is broken). Compute thread.
  bool serve_peers();
  uint64_t doorbell_value() const;
  void sleep(uint64_t seen, std::chrono::milliseconds timeout);
  void ring(); // any thread

  // The current formation cannot go on; a re-formation is wanted. Any thread.
  // `planned`: a member left the group on purpose (scaled down): the same re-forming, logged as
  // what it is rather than as a failure.
  void fail(const std::string& why, bool planned = false);
  bool broken() const { return broken_; }
  std::string failure() const;
  // "expert-parallel group broken: <failure>", what requests and reports end with.
  std::string broken_reason() const;
  // Actor thread: a member that went down breaks the formation; one that joined (a restarted
  // process) is taken in at the next re-formation.
  void on_member_event(const transport::membership_event& event);
  // The group's part of the instance's load report: why it is unavailable, its stage times.
  void add_to(protocol::load_report& report) const;
  // Seconds per [MoE layer][stage], flattened, and forwards, for load reports (empty before
  // the group connects).
  std::vector<double> stage_seconds(uint64_t& forwards) const;

private:
  // The configured members alive now with their incarnations, and the joined expert shards when
  // the group takes them; nothing while some alive member's incarnation is still unknown (it
  // has not been heard from yet).
  std::optional<std::vector<std::pair<std::string, uint64_t>>> alive_view() const;
  // A configured member, or a joined expert shard the group takes.
  bool is_member(const std::string& peer) const;
  // The formation the members of `view` make; nothing, and `why`, when no expert host is in it.
  std::optional<ep_formation>
  formation_of(const std::vector<std::pair<std::string, uint64_t>>& view, std::string& why) const;
  // The formation the members alive now make; nothing while an incarnation is unknown or no
  // expert host is alive (the broken path waits for one).
  std::optional<ep_formation> formation_now() const;
  // Compute thread, while the formation in service serves over shared memory: makes the region
  // of `f`, a formation other than it (once per epoch), and says whether every rank of `f` has
  // made its own.
  bool next_formation_ready(const ep_formation& f);
  bool connect_formation(const ep_formation& f, const std::function<bool()>& stop,
                         std::string& why);

  std::shared_ptr<const model::model_weights> weights_;
  const ep_membership configured_;
  std::unique_ptr<const ep_member_view> view_;
  // The fabric and expert_parallel change only on the compute thread, under fabric_mutex_;
  // other threads (ring, fail) take the mutex to use them.
  mutable std::mutex fabric_mutex_;
  std::unique_ptr<transport::rank_fabric> fabric_;
  std::unique_ptr<expert_parallel> ep_;
  std::atomic<bool> connected_{false}, broken_{false}, reform_wanted_{true};
  uint64_t formations_ = 0; // made since start, the first included (compute thread)
  std::string epoch_;       // of the formation in service (compute thread)
  // The next formation, made beside the one in service (compute thread).
  std::unique_ptr<transport::rank_fabric> next_fabric_;
  std::string next_epoch_;
  mutable std::mutex mutex_; // failure_, broke_at_, formation_members_
  std::string failure_;
  std::chrono::steady_clock::time_point broke_at_{};
  std::vector<std::string> formation_members_; // of the formation made or being made
  ep_stage_times earlier_times_;               // stage times of formations before the current one
};

} // namespace supernode::services
