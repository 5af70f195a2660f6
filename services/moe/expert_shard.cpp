#include "services/moe/expert_shard.hpp"

#include "services/serving/delivery.hpp"

namespace supernode::services {

expert_shard::expert_shard(std::shared_ptr<const model::model_weights> weights,
                           ep_membership membership)
    : group_(std::move(weights), std::move(membership)) {
  protocol::register_serving_messages();
}

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

void expert_shard::on_tick(transport::endpoint& out) {
  protocol::load_report r;
  r.role = "expert_shard";
  if (group_.broken()) r.unavailable = "expert-parallel group broken: " + group_.failure();
  r.ep_stage_seconds = group_.stage_seconds(r.ep_forwards);
  send_load_report(out, std::move(r));
}

} // namespace supernode::services
