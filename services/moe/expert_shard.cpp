#include "services/moe/expert_shard.hpp"

namespace supernode::services {

expert_shard::expert_shard(std::shared_ptr<const model::model_weights> weights,
                           ep_membership membership)
    : group_(std::move(weights), std::move(membership)) {}

expert_shard::~expert_shard() {
  stop();
}

void expert_shard::start(transport::endpoint& out) {
  (void)out;
  worker_.start_in_group(
      group_, [] { return false; }, [] {});
}

void expert_shard::stop() {
  worker_.stop();
}

void expert_shard::on_message(const transport::peer_id&, const transport::envelope&,
                              transport::endpoint&) {}

void expert_shard::on_member_event(const transport::membership_event& event,
                                   transport::endpoint& out) {
  (void)out;
  if (event.what == transport::membership_event::kind::joined) return;
  for (auto& m : group_.membership().members)
    if (m == event.peer) group_.fail(event.peer + " is down (" + event.reason + ")");
}

} // namespace supernode::services
