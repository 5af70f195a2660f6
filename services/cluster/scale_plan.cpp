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

scale_plan plan_scale(const std::vector<slot_view>& slots, const scale_request& request,
                      const join_refusals& joins) {
  scale_plan plan;
  auto refuse = [](std::string why) {
    scale_plan refused; // nothing to start or stop: a refused request changes nothing
    refused.error = std::move(why);
    return refused;
  };
  if (request.counts.empty()) {
    return refuse("no process kind to scale (give PROCESS=COUNT)");
  }
  for (const auto& [kind, count] : request.counts) {
    std::vector<const slot_view*> of_kind;
    for (auto& s : slots)
      if (process_kind_of(s.name) == kind) of_kind.push_back(&s);
    if (of_kind.empty()) return refuse("no process kind '" + kind + "' in the config");
    if (count < 0 || count > max_processes_per_kind)
      return refuse("process '" + kind + "' count must be 0.." +
                    std::to_string(max_processes_per_kind) + ", not " + std::to_string(count));
    if (static_cast<size_t>(count) > of_kind.size()) {
      const auto join = joins.find(kind);
      if (join == joins.end() || !join->second.empty())
        return refuse("process '" + kind + "' has " + std::to_string(of_kind.size()) +
                      " slot(s), so its count must be 0.." + std::to_string(of_kind.size()) +
                      ", not " + std::to_string(count) + ": more would join at run time, and " +
                      (join == joins.end() ? "this kind cannot" : join->second));
    }
    for (size_t i = 0; i < of_kind.size(); ++i) {
      const bool want = i < static_cast<size_t>(count);
      if (want && !of_kind[i]->wanted) plan.start.push_back(of_kind[i]->name);
      if (!want && of_kind[i]->wanted) plan.stop.push_back(of_kind[i]->name);
    }
    for (size_t i = of_kind.size(); i < static_cast<size_t>(count); ++i) {
      plan.add.push_back(kind + "-" + std::to_string(i));
      plan.start.push_back(plan.add.back());
    }
  }
  return plan;
}

scale_operations::verdict scale_operations::classify(const scale_request& request,
                                                     std::string* answer) const {
  if (!request.operation_id.empty()) {
    if (auto it = done_.find(request.operation_id); it != done_.end()) {
      if (it->second.first != request.counts) return verdict::conflict;
      if (answer) *answer = it->second.second;
      return verdict::repeat;
    }
    if (running_ && running_->operation_id == request.operation_id)
      return running_->counts == request.counts ? verdict::repeat : verdict::conflict;
  }
  return running_ ? verdict::conflict : verdict::fresh;
}

void scale_operations::begin(const scale_request& request) {
  running_ = request;
}

void scale_operations::finish(const std::string& answer) {
  if (running_ && !running_->operation_id.empty())
    done_[running_->operation_id] = {running_->counts, answer};
  running_.reset();
}

} // namespace supernode::services::cluster
