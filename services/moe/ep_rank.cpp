#include "services/moe/ep_rank.hpp"

namespace supernode::services {

ep_rank::ep_rank(std::shared_ptr<const model::model_weights> weights, ep_membership membership)
    : weights_(std::move(weights)), membership_(std::move(membership)),
      fabric_(membership_.fabric_kind == "zmq"
                  ? transport::make_zmq_rank_fabric(membership_.fabric)
                  : transport::make_shm_rank_fabric(membership_.fabric)) {
  const auto layout =
      expert_parallel::layout_for(weights_->config, weights_->prec, membership_.options);
  fabric_->log().info("expert parallelism: {}; {}", membership_.describe(), layout.describe());
}

bool ep_rank::connect(const std::function<bool()>& give_up) {
  std::string why;
  if (!fabric_->connect(membership_.options.op_timeout * 4, give_up, why)) {
    fail(why);
    return false;
  }
  try {
    ep_ = std::make_unique<expert_parallel>(weights_, *fabric_, membership_.options);
  } catch (const std::exception& e) {
    fail(e.what());
    return false;
  }
  connected_ = true;
  if (broken_) ep_->fail(failure());
  return true;
}

void ep_rank::forward(int64_t layer, const model::moe_weights& w, const float* x, int64_t rows,
                      float* out) {
  if (!connected_ || broken_)
    throw ep_failure("expert-parallel group " + membership_.fabric.group + " is not serving: " +
                     (broken_ ? failure() : std::string("peers not connected yet")));
  try {
    ep_->forward(layer, w, x, rows, out);
  } catch (const ep_failure& e) {
    fail(e.what());
    throw;
  }
}

void ep_rank::forward_begins() {
  if (connected_ && !broken_) ep_->forward_begins();
}

bool ep_rank::serve_peers() {
  if (!connected_ || broken_ || !ep_->peer_waiting()) return false;
  try {
    ep_->serve_idle_forward();
  } catch (const ep_failure& e) {
    fail(e.what());
  }
  return true;
}

uint64_t ep_rank::doorbell_value() const {
  return fabric_->load(ep_flag_doorbell);
}

void ep_rank::sleep(uint64_t seen, std::chrono::milliseconds timeout) {
  fabric_->wait(ep_flag_doorbell, seen + 1, timeout);
}

void ep_rank::ring() {
  fabric_->add(membership_.options.rank, ep_flag_doorbell, 1);
}

void ep_rank::fail(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) return;
    failure_ = why;
  }
  broken_ = true;
  fabric_->log().error("expert parallelism: {} broken: {}", membership_.fabric.group, why);
  if (connected_) ep_->fail(why);
  // Tell the peers at once (they see "rank N left the group"), so the whole group stops
  // together instead of each peer waiting out its op timeout.
  fabric_->leave();
  ring();
}

std::string ep_rank::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

std::string ep_rank::broken_reason() const {
  return "expert-parallel group broken: " + failure();
}

void ep_rank::on_member_event(const transport::membership_event& event) {
  if (event.what == transport::membership_event::kind::joined) return;
  for (auto& m : membership_.members)
    if (m == event.peer) fail(event.peer + " is down (" + event.reason + ")");
}

void ep_rank::add_to(protocol::load_report& report) const {
  if (broken_) report.unavailable = {protocol::ep_errc::group_broken, broken_reason()};
  report.ep_stage_seconds = stage_seconds(report.ep_forwards);
  // Fabric messages from a rank that proved another identity (zmq fabric under CURVE).
  if (fabric_)
    if (const auto n = fabric_->trust_rejections())
      report.rejected_messages["ep_identity_mismatch"] += n;
}

std::vector<double> ep_rank::stage_seconds(uint64_t& forwards) const {
  forwards = 0;
  if (!connected_) return {};
  const auto t = ep_->stage_times();
  std::vector<double> flat;
  for (auto& layer : t.seconds) flat.insert(flat.end(), layer.begin(), layer.end());
  forwards = t.forwards;
  return flat;
}

} // namespace supernode::services
