#include "services/moe/ep_rank.hpp"

#include "transport/endpoint.hpp"

#include <algorithm>
#include <thread>

namespace supernode::services {

namespace {
bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

class endpoint_member_view final : public ep_member_view {
public:
  explicit endpoint_member_view(const transport::endpoint& out) : out_(out) {}
  const std::string& self() const override { return out_.self(); }
  uint64_t incarnation() const override { return out_.incarnation(); }
  std::vector<std::string> names() const override {
    std::vector<std::string> names;
    for (auto& [name, m] : out_.members()) names.push_back(name);
    return names;
  }
  std::optional<uint64_t> live_incarnation(const std::string& name) const override {
    return out_.live_incarnation(name);
  }

private:
  const transport::endpoint& out_;
};
} // namespace

ep_rank::ep_rank(std::shared_ptr<const model::model_weights> weights, ep_membership membership)
    : weights_(std::move(weights)), configured_(std::move(membership)),
      formation_members_(configured_.members) {
  const auto layout =
      expert_parallel::layout_for(weights_->config, weights_->prec, configured_.options);
  configured_.fabric.log.info("expert parallelism: {}; {}", configured_.describe(),
                              layout.describe());
}

ep_rank::~ep_rank() {
  std::lock_guard lock(fabric_mutex_);
  ep_.reset();
  if (fabric_) fabric_->leave();
  if (next_fabric_) next_fabric_->leave();
}

void ep_rank::watch(const transport::endpoint& out) {
  view_ = std::make_unique<endpoint_member_view>(out);
}

void ep_rank::watch(std::unique_ptr<const ep_member_view> view) {
  view_ = std::move(view);
}

std::vector<std::string> ep_rank::formation_members() const {
  std::lock_guard lock(mutex_);
  return formation_members_;
}

std::optional<std::vector<std::pair<std::string, uint64_t>>> ep_rank::alive_view() const {
  std::vector<std::pair<std::string, uint64_t>> view;
  std::vector<std::string> names = configured_.members;
  if (view_ && configured_.takes_joined_shards)
    for (auto& name : view_->names())
      if (is_expert_shard_name(name) && !contains(names, name)) names.push_back(name);
  for (const auto& name : names) {
    if (!view_) {
      view.emplace_back(name, 1);
    } else if (name == view_->self()) {
      view.emplace_back(name, view_->incarnation());
    } else if (const auto incarnation = view_->live_incarnation(name)) {
      if (*incarnation == 0) return std::nullopt; // alive but not heard from: wait for it
      view.emplace_back(name, *incarnation);
    }
  }
  return view;
}

bool ep_rank::is_member(const std::string& peer) const {
  return contains(configured_.members, peer) ||
         (configured_.takes_joined_shards && is_expert_shard_name(peer));
}

std::optional<ep_formation>
ep_rank::formation_of(const std::vector<std::pair<std::string, uint64_t>>& view,
                      std::string& why) const {
  try {
    return formed_over(configured_, view, weights_->config, weights_->prec);
  } catch (const std::exception& e) {
    why = e.what(); // no expert host alive
    return std::nullopt;
  }
}

std::optional<ep_formation> ep_rank::formation_now() const {
  const auto view = alive_view();
  std::string why;
  return view ? formation_of(*view, why) : std::nullopt;
}

bool ep_rank::next_formation_ready(const ep_formation& f) {
  try {
    if (next_epoch_ != f.epoch) {
      if (next_fabric_) next_fabric_->leave();
      next_fabric_.reset();
      next_epoch_.clear();
      next_fabric_ = transport::make_shm_rank_fabric(f.membership.fabric);
      next_epoch_ = f.epoch;
    }
    // One look at the peers' regions: the formation in service goes on until all are there.
    std::string why;
    return next_fabric_->connect(
        std::chrono::milliseconds(0), [] { return true; }, why);
  } catch (const std::exception&) {
    return false; // a region of this name is still there: the next boundary looks again
  }
}

bool ep_rank::form(const std::function<bool()>& give_up, std::chrono::milliseconds patience) {
  using clock = std::chrono::steady_clock;
  // Every look at the membership view below clears the wish to re-form *before* it reads the
  // view: a change that lands after the read sets it again and is looked at, where clearing
  // after the read would drop a change that landed in between (a member down that the attempt
  // counted alive: it waited for the dead rank's region until its patience ran out).
  if (connected_ && !broken_) {
    // The members and incarnations the formation in service has (a member heard from again
    // after a late heartbeat): nothing to re-form. Re-making the same epoch would re-create
    // regions of the same names, which peers still mapping the old ones take for a rank leaving,
    // and re-form in turn, on and on.
    reform_wanted_ = false;
    const auto now = formation_now();
    if (now && now->epoch == epoch_) return true;
    // Growing while serving over shared memory: make before break.
    if (configured_.fabric_kind == "shm" && (!now || !next_formation_ready(*now))) {
      reform_wanted_ = true; // look again at the next boundary
      return false;
    }
  }
  const auto deadline = clock::now() + patience;
  std::string why = "the members' incarnations are not known yet";
  while (!give_up()) {
    if (clock::now() >= deadline) {
      fail("cannot re-form: " + why);
      configured_.fabric.log.error("expert parallelism: {} could not form within {} ms: {}; "
                                   "trying again",
                                   configured_.fabric.group, patience.count(), why);
      reform_wanted_ = true; // the next round tries again
      return false;
    }
    // From here a membership change asks for the next formation and ends this attempt.
    reform_wanted_ = false;
    const auto view = alive_view();
    if (!view) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5)); // heartbeats bring them
      continue;
    }
    const auto formed = formation_of(*view, why);
    if (!formed) { // no expert host alive: wait for one to come back
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const ep_formation& f = *formed;
    {
      std::lock_guard lock(mutex_);
      formation_members_ = f.membership.members;
    }
    if (!broken_) { // growing back: the formation in service stops serving now
      std::lock_guard lock(mutex_);
      broke_at_ = clock::now();
    }
    auto stop = [&] { return give_up() || reform_wanted_ || clock::now() >= deadline; };
    if (!connect_formation(f, stop, why)) continue;
    ++formations_;
    epoch_ = f.epoch;
    clock::time_point broke_at;
    {
      std::lock_guard lock(mutex_);
      failure_.clear();
      broke_at = broke_at_;
    }
    broken_ = false;
    connected_ = true;
    const bool first = formations_ == 1;
    const auto pause_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - broke_at).count();
    size_t joined = 0;
    for (auto& name : f.membership.members) joined += !contains(configured_.members, name);
    const auto ranks = joined == 0 ? std::to_string(f.membership.options.ranks) + " of " +
                                         std::to_string(configured_.options.ranks) + " ranks"
                                   : std::to_string(f.membership.options.ranks) + " ranks (" +
                                         std::to_string(joined) + " of them joined shards)";
    configured_.fabric.log.info(
        "expert parallelism: {} {} over {} (epoch {}){}", configured_.fabric.group,
        first ? "formed" : "re-formed", ranks, f.epoch,
        first ? "" : ", serving again " + std::to_string(pause_ms) + " ms after it stopped");
    return true;
  }
  return false;
}

bool ep_rank::connect_formation(const ep_formation& f, const std::function<bool()>& stop,
                                std::string& why) {
  {
    // The old formation goes first: its region or socket must not outlive it, and its peers
    // must see it leave.
    std::lock_guard lock(fabric_mutex_);
    connected_ = false;
    if (ep_) earlier_times_.add(ep_->stage_times());
    ep_.reset();
    if (fabric_) fabric_->leave();
    fabric_.reset();
  }
  // The next formation made beside the old one, if it is this one.
  std::unique_ptr<transport::rank_fabric> fabric;
  if (next_fabric_ && next_epoch_ == f.epoch) fabric = std::move(next_fabric_);
  if (next_fabric_) next_fabric_->leave();
  next_fabric_.reset();
  next_epoch_.clear();
  std::unique_ptr<expert_parallel> ep;
  try {
    const auto& o = f.membership.fabric;
    if (!fabric)
      fabric = f.membership.fabric_kind == "zmq" ? transport::make_zmq_rank_fabric(o)
                                                 : transport::make_shm_rank_fabric(o);
    if (!fabric->connect(configured_.options.op_timeout * 4, stop, why)) return false;
    ep = std::make_unique<expert_parallel>(weights_, *fabric, f.membership.options);
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
  std::lock_guard lock(fabric_mutex_);
  fabric_ = std::move(fabric);
  ep_ = std::move(ep);
  return true;
}

void ep_rank::forward(int64_t layer, const model::moe_weights& w, const float* x, int64_t rows,
                      float* out) {
  if (!connected_ || broken_)
    throw ep_failure("expert-parallel group " + configured_.fabric.group +
                     " is not serving: " + (broken_ ? failure() : std::string("not formed yet")));
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
  return fabric_ ? fabric_->load(ep_flag_doorbell) : 0; // the compute thread's own fabric_
}

void ep_rank::sleep(uint64_t seen, std::chrono::milliseconds timeout) {
  if (!fabric_)
    return std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(10)));
  fabric_->wait(ep_flag_doorbell, seen + 1, timeout);
}

void ep_rank::ring() {
  std::lock_guard lock(fabric_mutex_);
  if (fabric_) fabric_->add(fabric_->rank(), ep_flag_doorbell, 1);
}

void ep_rank::fail(const std::string& why, bool planned) {
  reform_wanted_ = true; // also when it already broke: a formation being made is stale too
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) return;
    failure_ = why;
    broke_at_ = std::chrono::steady_clock::now();
  }
  broken_ = true;
  if (planned)
    configured_.fabric.log.info("expert parallelism: {}: {}; re-forming over the members left",
                                configured_.fabric.group, why);
  else
    configured_.fabric.log.error("expert parallelism: {} broken: {}; re-forming over the members "
                                 "alive",
                                 configured_.fabric.group, why);
  // Tell the peers at once (they see "rank N left the group"), so the whole formation stops
  // together instead of each peer waiting out its op timeout.
  std::lock_guard lock(fabric_mutex_);
  if (ep_) ep_->fail(why);
  if (fabric_) {
    fabric_->leave();
    fabric_->add(fabric_->rank(), ep_flag_doorbell, 1);
  }
}

std::string ep_rank::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

std::string ep_rank::broken_reason() const {
  return "expert-parallel group broken: " + failure();
}

void ep_rank::on_member_event(const transport::membership_event& event) {
  if (!is_member(event.peer)) return;
  bool in_formation;
  {
    std::lock_guard lock(mutex_);
    in_formation = contains(formation_members_, event.peer);
  }
  if (event.what == transport::membership_event::kind::joined) {
    // Back (a new incarnation, or alive again): whether or not the formation being made
    // counted it, its incarnation may differ from the one it used.
    configured_.fabric.log.info("expert parallelism: {} {}; the group forms again at the next "
                                "step",
                                event.peer, in_formation ? "rejoined" : "is back");
    reform_wanted_ = true;
    return ring();
  }
  if (!in_formation) {
    // Not in the formation made or being made, but perhaps in the view an attempt has read and
    // not yet recorded as its members: that attempt looks again (a formation in service that
    // lacks the member anyway finds nothing to change).
    reform_wanted_ = true;
    return;
  }
  if (event.what == transport::membership_event::kind::left)
    fail(event.peer + " left (" + event.reason + ")", /*planned=*/true);
  else
    fail(event.peer + " is down (" + event.reason + ")");
}

void ep_rank::add_to(protocol::load_report& report) const {
  if (broken_) report.unavailable = {protocol::ep_errc::group_broken, broken_reason()};
  report.ep_stage_seconds = stage_seconds(report.ep_forwards);
  // Fabric messages from a rank that proved another identity (zmq fabric under CURVE), and from
  // a socket naming a rank that is not the connection the rank said hello on.
  std::lock_guard lock(fabric_mutex_);
  if (!fabric_) return;
  if (const auto n = fabric_->trust_rejections())
    report.rejected_messages["ep_identity_mismatch"] += n;
  if (const auto n = fabric_->stale_messages())
    report.rejected_messages["ep_stale_connection"] += n;
}

std::vector<double> ep_rank::stage_seconds(uint64_t& forwards) const {
  std::lock_guard lock(fabric_mutex_);
  auto t = earlier_times_;
  if (ep_) t.add(ep_->stage_times());
  std::vector<double> flat;
  for (auto& layer : t.seconds) flat.insert(flat.end(), layer.begin(), layer.end());
  forwards = t.forwards;
  return flat;
}

} // namespace supernode::services
