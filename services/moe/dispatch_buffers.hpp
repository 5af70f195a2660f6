#pragma once
// The static buffers of FusedDispatch and FusedCombine (§4.2.1), sized once for the worst case
// so no step ever allocates or overflows:
//   max_tokens = local_batch × min(topk, experts_per_rank)   what one source can send one rank
//   buffer     = ranks × max_tokens × msg_size               per receiving rank
// A dispatch message is one token's INT8 hidden state, its per-token scale and its routing
// metadata (source rank, batch slot, route slot), padded so every message starts aligned; a
// combine message is one expert output in FP32 (kept exact for the invariant). Each kind has its
// own buffer (double buffering: a combine never overwrites a dispatch still being read).

#include <cstddef>
#include <cstdint>
#include <string>

namespace supernode::services {

struct dispatch_header {
  int32_t source_rank = 0;
  int32_t batch_slot = 0;
  int32_t route_slot = 0;
  int32_t expert = 0; // the routed expert (the receiver may host several)
  float scale = 0.0f; // the token's INT8 scale
};

struct dispatch_sizes {
  int64_t ranks = 1;
  int64_t local_batch = 1; // tokens a rank holds in one step (one microbatch)
  int64_t topk = 8;
  int64_t experts_per_rank = 1; // the most any rank hosts, replicas included
  int64_t hidden = 0;
  size_t alignment = 64; // message alignment (the paper pads the scale to 512 bytes)
  size_t combine_element_bytes = sizeof(float);

  int64_t max_tokens() const;
  size_t dispatch_message_bytes() const;
  size_t combine_message_bytes() const;
  size_t dispatch_buffer_bytes() const; // per receiving rank
  size_t combine_buffer_bytes() const;  // per receiving rank
  // "dispatch 320 × 96 × 7.5 KiB = 225 MiB, combine ... per rank", for the start-up log.
  std::string describe() const;
  // Throws std::invalid_argument naming the first non-positive size.
  void validate() const;
};

} // namespace supernode::services
