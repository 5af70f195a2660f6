#pragma once
// `supernode bench model --attention-kernel`: MLA prefill attention alone, at the model's head
// shapes, for whole prompts and for short chunks after a long cached prefix, on every path this CPU
// has (the flash tiles per instruction set, their BF16 scores, and the untiled kernel they
// replaced), timed alternately in one process so the machine's load falls on all of them alike.

#include "model/config.hpp"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace supernode::apps {

// `new_tokens` queries after `cached_tokens` keys already in the cache (0: a whole prompt).
struct attention_chunk {
  int64_t cached_tokens = 0, new_tokens = 0;
};
nlohmann::json attention_kernel_report(const model::model_config& c,
                                       const std::vector<attention_chunk>& chunks);

} // namespace supernode::apps
