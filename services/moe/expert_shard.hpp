#pragma once
// The expert shard role of the attention/MoE split (MegaScale-Infer, §6.2.1): a rank of a decode
// instance's expert-parallel group that hosts routed experts and holds no sequences. Its compute
// thread only serves the forwards the attention ranks start; it has no messages of its own.

#include "services/moe/ep_rank.hpp"
#include "services/moe/expert_shard_interface.hpp"
#include "services/role_logic.hpp"
#include "services/serving/compute_worker.hpp"

namespace supernode::services {

class expert_shard : public role_logic {
public:
  using interface = expert_shard_interface;
  expert_shard(std::shared_ptr<const model::model_weights> weights, ep_membership membership);
  ~expert_shard() override;

  void start(transport::endpoint& out) override;
  void stop() override;
  void on_member_event(const transport::membership_event& event, transport::endpoint& out) override;
  // Reports its stage times (and a broken group) like the ranks that hold sequences.
  void on_tick(transport::endpoint& out) override;

private:
  ep_rank group_;
  compute_worker worker_; // last: stops before the group goes
};

} // namespace supernode::services
