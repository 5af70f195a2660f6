#pragma once
// EPLB, expert-parallel load balancing (DeepSeek's EPLB, CloudMatrix-Infer §4.2): from the tokens
// each expert received over a window, give hot experts redundant replicas and spread the
// replicas so the most loaded rank serves as few tokens as possible.

#include "services/moe/expert_placement.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace supernode::services {

struct eplb_options {
  // Extra expert slots each rank gives to redundant replicas: a rank hosts at most
  // ceil(experts / ranks) + redundant_per_rank experts. 0 only rearranges experts.
  int32_t redundant_per_rank = 1;
};

// expert_load[e] = tokens routed to expert e. Adds ranks * redundant_per_rank replicas (fewer
// once every expert is on every rank), one at a time to the expert with the highest load per
// replica, then places replicas heaviest-first on the least loaded rank with a free slot that
// lacks that expert (LPT). Deterministic: ties go to fewer replicas / fewer hosted experts,
// then the lowest index. Throws std::invalid_argument for ranks <= 0, ranks > experts or
// negative options.
expert_placement plan_placement(std::span<const uint64_t> expert_load, int32_t ranks,
                                const eplb_options& options);

// counts is row-major [sources][experts]; the result is the tokens each rank serves when every
// token goes to p.route(expert, source).rank — the load the runtime sees, not the planner's
// load/replicas estimate.
std::vector<uint64_t> rank_loads(const expert_placement& p, std::span<const uint64_t> counts,
                                 int32_t sources);

struct load_balance {
  double max_load = 0;
  double mean_load = 0;
  double ratio = 1; // max / mean; 1 when mean is 0 (nothing to balance)
};

load_balance balance_of(std::span<const uint64_t> rank_loads);

} // namespace supernode::services
