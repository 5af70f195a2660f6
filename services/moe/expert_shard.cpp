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
  group_.watch(out);
  worker_.start_in_group(
      group_, [] { return false; }, [] {});
}

void expert_shard::stop() {
  worker_.stop();
}

void expert_shard::on_member_event(const transport::membership_event& event,
                                   transport::endpoint& out) {
  (void)out;
  group_.on_member_event(event);
}

void expert_shard::on_tick(transport::endpoint& out) {
  protocol::load_report r;
  r.role = "expert_shard";
  group_.add_to(r);
  send_load_report(out, std::move(r));
}

} // namespace supernode::services
