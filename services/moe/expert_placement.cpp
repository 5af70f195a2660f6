#include "services/moe/expert_placement.hpp"

#include <algorithm>
#include <stdexcept>

namespace supernode::services {

expert_placement expert_placement::uniform(int32_t experts, int32_t ranks) {
  if (experts <= 0 || ranks <= 0 || ranks > experts)
    throw std::invalid_argument("expert placement: need 0 < ranks <= experts, got " +
                                std::to_string(ranks) + " ranks for " + std::to_string(experts) +
                                " experts");
  expert_placement p;
  p.replicas_.resize(experts);
  p.hosted_.resize(ranks);
  const int32_t base = experts / ranks, extra = experts % ranks;
  int32_t e = 0;
  for (int32_t r = 0; r < ranks; ++r)
    for (int32_t i = 0; i < base + (r < extra ? 1 : 0); ++i, ++e) {
      p.replicas_[e].push_back({r, i});
      p.hosted_[r].push_back(e);
    }
  return p;
}

void expert_placement::add_replica(int32_t expert, int32_t rank) {
  if (expert < 0 || expert >= experts() || rank < 0 || rank >= ranks())
    throw std::invalid_argument("expert placement: expert " + std::to_string(expert) + " or rank " +
                                std::to_string(rank) + " out of range");
  auto& reps = replicas_[expert];
  if (std::any_of(reps.begin(), reps.end(), [&](const expert_slot& s) { return s.rank == rank; }))
    throw std::invalid_argument("expert placement: rank " + std::to_string(rank) +
                                " already hosts expert " + std::to_string(expert));
  reps.push_back({rank, static_cast<int32_t>(hosted_[rank].size())});
  hosted_[rank].push_back(expert);
}

int32_t expert_placement::max_experts_per_rank() const {
  size_t most = 0;
  for (auto& h : hosted_) most = std::max(most, h.size());
  return static_cast<int32_t>(most);
}

expert_slot expert_placement::route(int32_t expert, int32_t source_rank) const {
  const auto& reps = replicas_.at(expert);
  for (auto& s : reps)
    if (s.rank == source_rank) return s;
  return reps[static_cast<size_t>(source_rank) % reps.size()];
}

std::string expert_placement::describe() const {
  int32_t copies = 0;
  for (auto& r : replicas_) copies += static_cast<int32_t>(r.size());
  return std::to_string(experts()) + " experts (" + std::to_string(copies - experts()) +
         " redundant copies) over " + std::to_string(ranks()) + " ranks, at most " +
         std::to_string(max_experts_per_rank()) + " per rank";
}

} // namespace supernode::services
