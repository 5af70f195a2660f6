// EPLB for expert_parallel (the class is declared in expert_parallel.hpp): counting, planning
// and switching placements between forwards.
#include "services/moe/eplb_planner.hpp"
#include "services/moe/expert_parallel.hpp"

namespace supernode::services {

// Every eplb_interval forwards each rank sends rank 0 the routed-token counts of its own tokens;
// once all are in, rank 0 plans a placement per MoE layer and publishes it with the forward it
// takes effect at (two ahead: no rank can have started that forward yet, and every rank will
// have seen the publication before it does, since it happened before rank 0's next dispatch).

void expert_parallel::exchange_stats() {
  const uint64_t per_forward = static_cast<uint64_t>(layout_.moe_layers * options_.microbatches);
  const uint64_t f = ops_ / per_forward;
  const auto interval = static_cast<uint64_t>(options_.eplb_interval);
  if (f > 0 && f % interval == 0) {
    fabric_.write(0, layout_.stats_offset(options_.rank), std::as_bytes(std::span(routed_counts_)));
    fabric_.add(0, ep_flag_stats, 1);
    std::fill(routed_counts_.begin(), routed_counts_.end(), 0);
  }
  if (options_.rank != 0 ||
      fabric_.load(ep_flag_stats) < (stats_rounds_ + 1) * static_cast<uint64_t>(options_.ranks))
    return;
  ++stats_rounds_;
  const int64_t experts = layout_.experts, ranks = options_.ranks;
  const auto hosts = static_cast<int32_t>(hosts_.size());
  std::vector<uint64_t> before(static_cast<size_t>(hosts), 0), after(before);
  std::vector<int32_t> words = {static_cast<int32_t>(placement_version_ + 1),
                                static_cast<int32_t>(f + 2),
                                static_cast<int32_t>(layout_.moe_layers)};
  for (int64_t l = 0; l < layout_.moe_layers; ++l) {
    std::vector<uint64_t> by_source(static_cast<size_t>(ranks * experts)), load(experts, 0);
    for (int64_t s = 0; s < ranks; ++s) {
      const auto* counts = reinterpret_cast<const uint32_t*>(
          fabric_.local() + layout_.stats_offset(static_cast<int>(s)));
      for (int64_t e = 0; e < experts; ++e) {
        by_source[s * experts + e] = counts[l * experts + e];
        load[e] += counts[l * experts + e];
      }
    }
    // The planner splits a hot expert's load evenly over its replicas; the runtime sends each
    // source to one replica. Judge the plan by the runtime's rule and keep the current
    // placement of a layer the plan would not improve.
    auto planned = plan_placement(load, hosts, eplb_options{options_.redundant_per_rank});
    const auto old_loads = rank_loads(placements_[l], by_source, static_cast<int32_t>(ranks));
    auto new_loads = rank_loads(planned, by_source, static_cast<int32_t>(ranks));
    if (balance_of(new_loads).max_load >= balance_of(old_loads).max_load) {
      planned = placements_[l];
      new_loads = old_loads;
    }
    for (int32_t h = 0; h < hosts; ++h) {
      before[h] += old_loads[h];
      after[h] += new_loads[h];
    }
    const auto w = planned.to_words();
    words.push_back(static_cast<int32_t>(w.size()));
    words.insert(words.end(), w.begin(), w.end());
  }
  if (words.size() > layout_.placement_words)
    throw std::logic_error("EPLB: a placement of " + std::to_string(words.size()) +
                           " words does not fit the region's " +
                           std::to_string(layout_.placement_words));
  for (int32_t r = 0; r < options_.ranks; ++r) {
    fabric_.write(r, layout_.placement_offset(), std::as_bytes(std::span(words)));
    fabric_.add(r, ep_flag_placement, 1);
  }
  const auto b = balance_of(before), a = balance_of(after);
  {
    std::lock_guard lock(shared_mutex_);
    rebalance_ = {placement_version_ + 1, b.ratio, a.ratio};
    if (first_rebalance_.version == 0) first_rebalance_ = rebalance_;
  }
  fabric_.log().info("EPLB: placement v{} from forward {}: max/mean host load {:.3f} -> {:.3f} "
                     "(tokens of the last {} forwards)",
                     placement_version_ + 1, f + 2, b.ratio, a.ratio, interval);
}

void expert_parallel::apply_published_placement() {
  const uint64_t per_forward = static_cast<uint64_t>(layout_.moe_layers * options_.microbatches);
  const uint64_t f = ops_ / per_forward;
  if (const uint64_t seen = fabric_.load(ep_flag_placement); seen > placements_seen_) {
    placements_seen_ = seen;
    const auto* w = reinterpret_cast<const int32_t*>(fabric_.local() + layout_.placement_offset());
    const std::span<const int32_t> words(w, layout_.placement_words);
    pending_placement next;
    next.version = static_cast<uint64_t>(words[0]);
    next.effective_forward = static_cast<uint64_t>(words[1]);
    size_t at = 3;
    try {
      if (words[2] != layout_.moe_layers) throw std::invalid_argument("layer count differs");
      for (int64_t l = 0; l < layout_.moe_layers; ++l) {
        const auto n = static_cast<size_t>(words[at]);
        if (n > words.size() - at - 1) throw std::invalid_argument("truncated");
        next.placements.push_back(expert_placement::from_words(words.subspan(at + 1, n)));
        at += 1 + n;
      }
    } catch (const std::invalid_argument& e) {
      fail(std::string("EPLB: rank 0 published a malformed placement: ") + e.what());
      check_failed();
    }
    pending_ = std::move(next);
  }
  if (pending_ && f >= pending_->effective_forward) {
    placements_ = std::move(pending_->placements);
    placement_version_ = pending_->version;
    pending_.reset();
  }
}

} // namespace supernode::services
