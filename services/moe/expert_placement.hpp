#pragma once
// Which decode rank hosts which routed expert (§4.2): every expert has one or more replicas,
// each on a different rank. A token's route to an expert goes to one replica, chosen from the
// token's source rank alone so every rank agrees without talking: a replica on the source rank
// itself when there is one (no traffic), otherwise replicas spread over sources round-robin.
// EPLB (issue 5) rewrites a placement between decode steps by adding and moving replicas.

#include <cstdint>
#include <string>
#include <vector>

namespace supernode::services {

struct expert_slot {
  int32_t rank = 0;
  int32_t local_index = 0; // position among the experts that rank hosts
  bool operator==(const expert_slot&) const = default;
};

class expert_placement {
public:
  // Experts in contiguous runs over the ranks, the first (experts % ranks) ranks one more.
  // Throws std::invalid_argument for non-positive counts or more ranks than experts.
  static expert_placement uniform(int32_t experts, int32_t ranks);

  // Adds a copy of `expert` on `rank`; throws std::invalid_argument when the rank already has
  // one or either index is out of range.
  void add_replica(int32_t expert, int32_t rank);

  int32_t experts() const { return static_cast<int32_t>(replicas_.size()); }
  int32_t ranks() const { return static_cast<int32_t>(hosted_.size()); }
  const std::vector<expert_slot>& replicas(int32_t expert) const { return replicas_.at(expert); }
  // The experts `rank` hosts, by local index.
  const std::vector<int32_t>& experts_on(int32_t rank) const { return hosted_.at(rank); }
  int32_t max_experts_per_rank() const;
  // The replica that serves `expert` for tokens of `source_rank`.
  expert_slot route(int32_t expert, int32_t source_rank) const;
  std::string describe() const;

private:
  std::vector<std::vector<expert_slot>> replicas_; // by expert
  std::vector<std::vector<int32_t>> hosted_;       // by rank
};

} // namespace supernode::services
