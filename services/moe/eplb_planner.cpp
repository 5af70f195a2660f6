#include "services/moe/eplb_planner.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace supernode::services {

namespace {

// load_a / reps_a > load_b / reps_b, exactly: 128 bits hold any uint64 load times a rank count.
bool heavier_per_replica(uint64_t load_a, int32_t reps_a, uint64_t load_b, int32_t reps_b) {
  using wide = unsigned __int128;
  return wide(load_a) * static_cast<uint64_t>(reps_b) >
         wide(load_b) * static_cast<uint64_t>(reps_a);
}

std::vector<int32_t> replica_counts(std::span<const uint64_t> load, int32_t ranks,
                                    int64_t redundant) {
  const auto experts = static_cast<int32_t>(load.size());
  std::vector<int32_t> reps(experts, 1);
  for (int64_t added = 0; added < redundant; ++added) {
    int32_t best = -1;
    for (int32_t e = 0; e < experts; ++e) {
      if (reps[e] >= ranks) continue;
      if (best < 0 || heavier_per_replica(load[e], reps[e], load[best], reps[best]) ||
          (!heavier_per_replica(load[best], reps[best], load[e], reps[e]) && reps[e] < reps[best]))
        best = e;
    }
    if (best < 0) break; // every expert already on every rank
    ++reps[best];
  }
  return reps;
}

// LPT over replicas, with the rank loads tracked as the planner's load/replicas estimate.
class replica_packer {
public:
  replica_packer(std::span<const uint64_t> load, const std::vector<int32_t>& reps, int32_t ranks,
                 int64_t cap)
      : load_(load), reps_(reps), cap_(cap), hosted_(ranks), rank_load_(ranks, 0.0) {}

  void place(int32_t expert) {
    int32_t best = -1;
    for (int32_t r = 0; r < ranks(); ++r)
      if (has_room(r) && !hosts(r, expert) && (best < 0 || lighter_rank(r, best))) best = r;
    if (best < 0) best = make_room_for(expert);
    put(expert, best);
  }

  std::vector<std::vector<int32_t>> take_hosted() {
    for (auto& h : hosted_) std::sort(h.begin(), h.end());
    return std::move(hosted_);
  }

private:
  int32_t ranks() const { return static_cast<int32_t>(hosted_.size()); }
  bool has_room(int32_t r) const { return static_cast<int64_t>(hosted_[r].size()) < cap_; }
  bool hosts(int32_t r, int32_t e) const {
    return std::find(hosted_[r].begin(), hosted_[r].end(), e) != hosted_[r].end();
  }
  double weight(int32_t e) const { return static_cast<double>(load_[e]) / reps_[e]; }
  bool lighter_rank(int32_t a, int32_t b) const {
    if (rank_load_[a] != rank_load_[b]) return rank_load_[a] < rank_load_[b];
    return hosted_[a].size() < hosted_[b].size(); // spreads zero-load experts evenly
  }
  void put(int32_t e, int32_t r) {
    hosted_[r].push_back(e);
    rank_load_[r] += weight(e);
  }
  void remove(int32_t e, int32_t r) {
    hosted_[r].erase(std::find(hosted_[r].begin(), hosted_[r].end(), e));
    rank_load_[r] -= weight(e);
  }

  // Every rank with a free slot already hosts `expert`. Since the expert is on fewer than all
  // ranks, some rank `full` lacks it and is full; a rank `spare` with room holds at most cap-2
  // other experts, so at least two of full's experts can move to spare. Moving the lightest one
  // frees a slot where `expert` may go.
  int32_t make_room_for(int32_t expert) {
    int32_t full = -1, spare = -1;
    for (int32_t r = 0; r < ranks(); ++r) {
      if (has_room(r) && (spare < 0 || lighter_rank(r, spare))) spare = r;
      if (!hosts(r, expert) && (full < 0 || lighter_rank(r, full))) full = r;
    }
    int32_t moved = -1;
    if (full >= 0 && spare >= 0)
      for (int32_t e : hosted_[full])
        if (!hosts(spare, e) &&
            (moved < 0 || weight(e) < weight(moved) || (weight(e) == weight(moved) && e < moved)))
          moved = e;
    if (moved < 0) throw std::logic_error("eplb: no slot for expert " + std::to_string(expert));
    remove(moved, full);
    put(moved, spare);
    return full;
  }

  std::span<const uint64_t> load_;
  const std::vector<int32_t>& reps_;
  int64_t cap_;
  std::vector<std::vector<int32_t>> hosted_;
  std::vector<double> rank_load_;
};

} // namespace

expert_placement plan_placement(std::span<const uint64_t> expert_load, int32_t ranks,
                                const eplb_options& options) {
  const auto experts = static_cast<int64_t>(expert_load.size());
  if (ranks <= 0 || ranks > experts || experts > INT32_MAX)
    throw std::invalid_argument("eplb: need 0 < ranks <= experts, got " + std::to_string(ranks) +
                                " ranks for " + std::to_string(experts) + " experts");
  if (options.redundant_per_rank < 0)
    throw std::invalid_argument("eplb: redundant_per_rank must be >= 0, got " +
                                std::to_string(options.redundant_per_rank));
  const int64_t cap =
      std::min<int64_t>((experts + ranks - 1) / ranks + options.redundant_per_rank, experts);
  const auto reps =
      replica_counts(expert_load, ranks, static_cast<int64_t>(ranks) * options.redundant_per_rank);

  std::vector<int32_t> order(experts);
  for (int32_t e = 0; e < experts; ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return heavier_per_replica(expert_load[a], reps[a], expert_load[b], reps[b]);
  });
  replica_packer packer(expert_load, reps, ranks, cap);
  for (int32_t e : order)
    for (int32_t copy = 0; copy < reps[e]; ++copy) packer.place(e);
  return expert_placement::from_hosted(static_cast<int32_t>(experts), packer.take_hosted());
}

std::vector<uint64_t> rank_loads(const expert_placement& p, std::span<const uint64_t> counts,
                                 int32_t sources) {
  const auto experts = static_cast<size_t>(p.experts());
  if (sources <= 0 || counts.size() != static_cast<size_t>(sources) * experts)
    throw std::invalid_argument(
        "eplb: counts must be [sources][experts] = " + std::to_string(sources) + " x " +
        std::to_string(experts) + ", got " + std::to_string(counts.size()) + " values");
  std::vector<uint64_t> loads(p.ranks(), 0);
  for (int32_t s = 0; s < sources; ++s)
    for (size_t e = 0; e < experts; ++e)
      loads[p.route(static_cast<int32_t>(e), s).rank] += counts[s * experts + e];
  return loads;
}

load_balance balance_of(std::span<const uint64_t> rank_loads) {
  load_balance b;
  if (rank_loads.empty()) return b;
  double total = 0;
  for (uint64_t l : rank_loads) {
    total += static_cast<double>(l);
    b.max_load = std::max(b.max_load, static_cast<double>(l));
  }
  b.mean_load = total / static_cast<double>(rank_loads.size());
  b.ratio = b.mean_load > 0 ? b.max_load / b.mean_load : 1.0;
  return b;
}

} // namespace supernode::services
