#pragma once
// The scheduler's choice of instances for a request (§4.1): no cache affinity — the context
// cache is shared, so any instance may serve any request. Prefill goes to the live instance
// with the fewest outstanding prompt tokens; decode to a live instance with room for the
// request's KV blocks, preferring the most free blocks. Ties go to the name that sorts first,
// so placement is deterministic.

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace supernode::services {

struct prefill_load {
  std::string instance;
  int64_t outstanding_tokens = 0; // prompt tokens queued or running
  bool alive = true;
  bool draining = false; // finishing its work, taking none
};

struct decode_load {
  std::string instance;
  int64_t free_kv_blocks = 0;
  int64_t running = 0; // sequences in its batch
  bool alive = true;
  bool draining = false;
};

std::optional<std::string> pick_prefill(std::span<const prefill_load> candidates);
std::optional<std::string> pick_decode(std::span<const decode_load> candidates,
                                       int64_t kv_blocks_needed);

} // namespace supernode::services
