#pragma once
// An instance's seat in its expert-parallel group: the registered region (created at once, so
// peers can find it), the connection to the peers and the expert_parallel built on it, plus the
// pieces of the compute loop that differ from a lone instance: serving peers' forwards while
// idle, sleeping on the group's doorbell, and remembering why the group broke.

#include "services/moe/ep_membership.hpp"
#include "services/moe/expert_parallel.hpp"
#include "services/protocol/serving_messages.hpp"
#include "transport/membership.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>

namespace supernode::services {

// It is also the transformer's routed_experts: until the group is connected, and after it
// broke, a forward throws ep_failure.
class ep_rank final : public model::routed_experts {
public:
  ep_rank(std::shared_ptr<const model::model_weights> weights, ep_membership membership);

  const ep_membership& membership() const { return membership_; }
  // Compute thread: waits for every peer's region, then builds the expert_parallel. On failure
  // the group is broken (failure() says why).
  bool connect(const std::function<bool()>& give_up);
  // Null until connected.
  expert_parallel* ep() { return ep_.get(); }
  void forward(int64_t layer, const model::moe_weights& w, const float* x, int64_t rows,
               float* out) override;
  void forward_begins() override;

  // Takes part in a forward a peer started, if any; false when there was none (or the group
  // is broken). Compute thread.
  bool serve_peers();
  uint64_t doorbell_value() const;
  void sleep(uint64_t seen, std::chrono::milliseconds timeout);
  void ring(); // any thread

  void fail(const std::string& why); // any thread
  bool broken() const { return broken_; }
  std::string failure() const;
  // "expert-parallel group broken: <failure>", what requests and reports end with.
  std::string broken_reason() const;
  // Actor thread: a member of the group that went down breaks it.
  void on_member_event(const transport::membership_event& event);
  // The group's part of the instance's load report: why it is unavailable, its stage times.
  void add_to(protocol::load_report& report) const;
  // Seconds per [MoE layer][stage], flattened, and forwards, for load reports (empty before
  // the group connects).
  std::vector<double> stage_seconds(uint64_t& forwards) const;

private:
  std::shared_ptr<const model::model_weights> weights_;
  ep_membership membership_;
  std::unique_ptr<transport::rank_fabric> fabric_;
  std::unique_ptr<expert_parallel> ep_;
  std::atomic<bool> connected_{false}, broken_{false};
  mutable std::mutex mutex_;
  std::string failure_;
};

} // namespace supernode::services
