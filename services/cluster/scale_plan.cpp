#include "services/cluster/scale_plan.hpp"

#include <algorithm>
#include <cctype>

namespace supernode::services::cluster {

std::string process_kind_of(const std::string& slot) {
  const auto dash = slot.rfind('-');
  if (dash == std::string::npos || dash + 1 == slot.size()) return slot;
  const bool digits = std::all_of(slot.begin() + static_cast<std::ptrdiff_t>(dash) + 1, slot.end(),
                                  [](unsigned char c) { return std::isdigit(c) != 0; });
  return digits ? slot.substr(0, dash) : slot;
}

namespace {

// The kind a slot is counted for: the one it serves while wanted, its own otherwise.
std::string counted_kind(const slot_view& s) {
  return s.wanted && !s.serves.empty() ? s.serves : process_kind_of(s.name);
}

size_t wanted_of(const std::vector<slot_view>& slots, const std::string& kind) {
  size_t n = 0;
  for (auto& s : slots) n += s.wanted && counted_kind(s) == kind;
  return n;
}

// The running slot of `from` to switch to `to`: one that came from `to` (switching back), or
// else the highest-numbered of `from`'s own, as a scale-down would pick.
slot_view* slot_to_switch(std::vector<slot_view>& slots, const std::string& from,
                          const std::string& to) {
  slot_view* pick = nullptr;
  for (auto& s : slots) {
    if (!s.wanted || counted_kind(s) != from) continue;
    if (process_kind_of(s.name) == to) return &s;
    pick = &s;
  }
  return pick;
}

} // namespace

scale_plan plan_scale(const std::vector<slot_view>& given, const scale_request& request,
                      const join_refusals& joins, const switchable_kinds& switchable,
                      const join_group_sizes& groups) {
  scale_plan plan;
  auto refuse = [](std::string why) {
    scale_plan refused; // nothing to start or stop: a refused request changes nothing
    refused.error = std::move(why);
    return refused;
  };
  if (request.counts.empty()) {
    return refuse("no process kind to scale (give PROCESS=COUNT)");
  }
  std::vector<slot_view> slots = given; // as the switches leave them
  if (request.switch_roles) {
    for (const auto& [kind, count] : request.counts)
      if (!switchable.count(kind))
        return refuse("process '" + kind + "' does not switch roles in place (prefill and " +
                      "decode processes that can join do)");
    for (const auto& [from, from_count] : request.counts)
      for (const auto& [to, to_count] : request.counts) {
        if (from == to) continue;
        while (wanted_of(slots, from) > static_cast<size_t>(from_count) &&
               wanted_of(slots, to) < static_cast<size_t>(to_count)) {
          auto* s = slot_to_switch(slots, from, to);
          s->serves = process_kind_of(s->name) == to ? "" : to;
          plan.switches.push_back({s->name, to});
        }
      }
  }
  for (const auto& [kind, count] : request.counts) {
    // Its own slots in order, with those switched to it (running) before the first of its own
    // that is not: a scale-down stops them before its own, a scale-up keeps them.
    std::vector<const slot_view*> of_kind, switched_in;
    for (auto& s : slots)
      if (process_kind_of(s.name) != kind && counted_kind(s) == kind) switched_in.push_back(&s);
    for (auto& s : slots) {
      if (process_kind_of(s.name) != kind || counted_kind(s) != kind) continue;
      if (!s.wanted) of_kind.insert(of_kind.end(), switched_in.begin(), switched_in.end());
      if (!s.wanted) switched_in.clear();
      of_kind.push_back(&s);
    }
    of_kind.insert(of_kind.end(), switched_in.begin(), switched_in.end());
    const bool known = std::any_of(slots.begin(), slots.end(),
                                   [&](auto& s) { return process_kind_of(s.name) == kind; });
    if (!known) return refuse("no process kind '" + kind + "' in the config");
    if (count < 0 || count > max_processes_per_kind)
      return refuse("process '" + kind + "' count must be 0.." +
                    std::to_string(max_processes_per_kind) + ", not " + std::to_string(count));
    size_t own_slots = 0;
    for (auto& s : slots) own_slots += process_kind_of(s.name) == kind;
    const size_t slot_count = std::max(own_slots, of_kind.size());
    if (static_cast<size_t>(count) > slot_count) {
      const auto join = joins.find(kind);
      if (join == joins.end() || !join->second.empty())
        return refuse("process '" + kind + "' has " + std::to_string(slot_count) +
                      " slot(s), so its count must be 0.." + std::to_string(slot_count) + ", not " +
                      std::to_string(count) + ": more would join at run time, and " +
                      (join == joins.end() ? "this kind cannot" : join->second));
      const auto group = groups.find(kind);
      const size_t ranks = group == groups.end() ? 1 : static_cast<size_t>(group->second);
      if (ranks > 1 && (static_cast<size_t>(count) - slot_count) % ranks != 0)
        return refuse("process '" + kind + "' joins in whole expert-parallel groups of " +
                      std::to_string(ranks) + " ranks past its " + std::to_string(slot_count) +
                      " slot(s), so its count must be at most " + std::to_string(slot_count) +
                      " or " + std::to_string(slot_count) + " plus a multiple of " +
                      std::to_string(ranks) + ", not " + std::to_string(count));
    }
    size_t wanted = 0;
    for (auto* s : of_kind) {
      const bool want = wanted < static_cast<size_t>(count);
      wanted += want;
      if (want && !s->wanted) plan.start.push_back(s->name);
      if (!want && s->wanted) plan.stop.push_back(s->name);
    }
    // New slots are numbered past every slot of the kind, switched away or not.
    for (size_t i = 0; wanted < static_cast<size_t>(count); ++i, ++wanted) {
      plan.add.push_back(kind + "-" + std::to_string(own_slots + i));
      plan.start.push_back(plan.add.back());
    }
  }
  return plan;
}

scale_operations::verdict scale_operations::classify(const scale_request& request,
                                                     std::string* answer) const {
  if (!request.operation_id.empty()) {
    if (auto it = done_.find(request.operation_id); it != done_.end()) {
      if (it->second.first != request) return verdict::conflict;
      if (answer) *answer = it->second.second;
      return verdict::repeat;
    }
    if (running_ && running_->operation_id == request.operation_id)
      return *running_ == request ? verdict::repeat : verdict::conflict;
  }
  return running_ ? verdict::conflict : verdict::fresh;
}

void scale_operations::begin(const scale_request& request) {
  running_ = request;
}

void scale_operations::finish(const std::string& answer) {
  if (running_ && !running_->operation_id.empty())
    done_[running_->operation_id] = {*running_, answer};
  running_.reset();
}

} // namespace supernode::services::cluster
