#pragma once
// Which decode rank hosts which routed expert (§4.2): every expert has one or more replicas,
// each on a different rank. A token's route to an expert goes to one replica, chosen from the
// token's source rank alone so every rank agrees without talking: a replica on the source rank
// itself when there is one (no traffic), otherwise replicas spread over sources round-robin.
// EPLB (issue 5) rewrites a placement between decode steps by adding and moving replicas.

#include <cstdint>
#include <span>
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
  // Rank r hosts hosted_by_rank[r], local indices in that order; each expert's replicas are
  // listed by rank, which fixes which replica off-rank sources use (see route). Throws
  // std::invalid_argument when an id is out of range, a rank hosts an expert twice or an
  // expert has no replica.
  static expert_placement from_hosted(int32_t experts,
                                      std::vector<std::vector<int32_t>> hosted_by_rank);
  // [experts, ranks, then per rank: count, ids...] — what a placement plan travels as.
  // Replica order is not stored: from_words rebuilds it by rank, as from_hosted does, so a
  // placement grown with add_replica can come back routing off-rank sources differently.
  std::vector<int32_t> to_words() const;
  // Throws std::invalid_argument naming the fault (truncated, bad count, id out of range,
  // trailing words, duplicate, missing expert).
  static expert_placement from_words(std::span<const int32_t> words);
  // Same experts on the same ranks at the same local indices.
  bool operator==(const expert_placement& other) const { return hosted_ == other.hosted_; }

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
