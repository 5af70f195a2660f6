#include "services/scheduler/placement.hpp"

#include <tuple>

namespace supernode::services {

std::optional<std::string> pick_prefill(std::span<const prefill_load> candidates) {
  const prefill_load* best = nullptr;
  for (auto& c : candidates) {
    if (!c.alive || c.draining) continue;
    if (!best || std::tie(c.outstanding_tokens, c.instance) <
                     std::tie(best->outstanding_tokens, best->instance))
      best = &c;
  }
  return best ? std::optional(best->instance) : std::nullopt;
}

std::optional<std::string> pick_decode(std::span<const decode_load> candidates,
                                       int64_t kv_blocks_needed) {
  const decode_load* best = nullptr;
  for (auto& c : candidates) {
    if (!c.alive || c.draining || c.free_kv_blocks < kv_blocks_needed) continue;
    // Most free blocks first, then the smaller batch, then the name.
    if (!best || std::make_tuple(-c.free_kv_blocks, c.running, c.instance) <
                     std::make_tuple(-best->free_kv_blocks, best->running, best->instance))
      best = &c;
  }
  return best ? std::optional(best->instance) : std::nullopt;
}

} // namespace supernode::services
