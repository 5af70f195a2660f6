#pragma once
// `supernode bench model --attention-kernel`: MLA prefill attention alone, at the model's head
// shapes and a few prompt lengths, on every path this CPU has (the flash tiles per instruction
// set, their BF16 scores, and the untiled kernel they replaced), timed alternately in one process
// so the machine's load falls on all of them alike.

#include "model/config.hpp"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace supernode::apps {

nlohmann::json attention_kernel_report(const model::model_config& c,
                                       const std::vector<int64_t>& prompt_lengths);

} // namespace supernode::apps
