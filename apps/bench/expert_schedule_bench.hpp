#pragma once
// `supernode bench model --expert-schedule`: one MoE layer's routed experts (gate_up, SwiGLU,
// down) for a prompt of N tokens, run with each expert_schedule in turn in one process (grouped
// GEMMs shared by the pool against one expert per thread), so the machine's load falls on both
// alike. Reports the best time of each, their ratio, and whether their outputs are the same bits.

#include "model/weights.hpp"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace supernode::apps {

nlohmann::json expert_schedule_report(const model::model_weights& weights,
                                      const std::vector<int64_t>& prompt_tokens);

} // namespace supernode::apps
