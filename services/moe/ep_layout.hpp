#pragma once
// Where everything lives in an expert-parallel rank's registered region. Every rank of a group
// registers the same layout, so a writer computes a peer's offsets from its own copy:
//
//   dispatch  [2 slots][source rank][max_tokens] messages   (payload, then dispatch_header)
//   counts    [2 slots][source rank] {op stamp, messages}   one cache line each
//   combine   [2 slots][batch slot][route slot] messages    ({op stamp}, then hidden floats)
//   stats     [source rank][moe layer][expert] uint32       routed tokens, for EPLB (rank 0's)
//   placement int32 words                                   the placement EPLB publishes
//   notes     [source rank][256 bytes]                       why a rank left a broken group
//
// Collective op m uses slot m % 2, so a source may fill op m+1's dispatch while the receiver is
// still reading op m's (double buffering). Sizes follow the paper's formula (dispatch_sizes);
// nothing in a step ever allocates in the region or writes past it.

#include "services/moe/dispatch_buffers.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace supernode::services {

// Flag words of the region.
enum ep_flag : size_t {
  ep_flag_announce = 0,  // forwards started by the peers (each adds 1 per forward)
  ep_flag_doorbell = 1,  // anything an idle rank should wake up for
  ep_flag_dispatch = 2,  // + slot: source ranks whose dispatch for the slot's op is in
  ep_flag_combine = 4,   // + slot: combine messages delivered for the slot's op
  ep_flag_stats = 6,     // source ranks whose EPLB stats are in (rank 0)
  ep_flag_placement = 7, // placement version published (every rank)
  ep_flag_count = 8
};

struct ep_layout {
  dispatch_sizes sizes; // hidden = payload bytes of one dispatched token
  int64_t hidden = 0;   // floats of one combined output
  int64_t moe_layers = 0, experts = 0;
  size_t placement_words = 0;

  size_t dispatch_message_bytes() const { return sizes.dispatch_message_bytes(); }
  size_t combine_message_bytes() const;
  size_t dispatch_offset(int slot, int source, int64_t index) const;
  size_t count_offset(int slot, int source) const;
  size_t combine_offset(int slot, int64_t batch_slot, int64_t route_slot) const;
  size_t stats_offset(int source) const;
  size_t stats_bytes_per_rank() const;
  size_t placement_offset() const;
  static constexpr size_t note_bytes = 256;
  size_t note_offset(int source) const;
  size_t total_bytes() const;
  // "dispatch 4 x 128 x 1152 B = 0.6 MiB, combine ..., region 3.1 MiB per rank (x2 slots)".
  std::string describe() const;
};

// Per-op bookkeeping written at count_offset: the op it belongs to and how many messages.
struct alignas(64) ep_count_entry {
  uint64_t op_stamp = 0; // op + 1
  int64_t messages = 0;
};

// Leads every combine message.
struct alignas(64) ep_combine_header {
  uint64_t op_stamp = 0;
};

} // namespace supernode::services
