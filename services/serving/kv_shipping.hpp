#pragma once
// Sending a sequence's KV to the decode instance that will run it, as kv_transfer runs over the
// bulk flow: from a prefill instance (the prompt's KV), or from a draining decode instance (a
// moving sequence's prompt and generated KV). Each run is whole blocks, checksummed, at most
// max_run_bytes, copied once straight from the pool into the message.

#include "model/kv_cache.hpp"
#include "model/mtp.hpp"
#include "services/protocol/serving_messages.hpp"
#include "transport/endpoint.hpp"

#include <span>

namespace supernode::services {

struct kv_shipment {
  protocol::request_key key;
  int32_t first_token = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;          // whose KV follows the prompt's
  const model::mtp_state* mtp = nullptr; // its rows go with the first block (kv_transfer)
};

inline constexpr size_t max_kv_run_bytes = size_t{16} << 20;

// Sends `blocks` of `pool` (in order: the sequence's first block first) to `to`; waits out a
// full queue (the bulk flow's back-pressure) for a while. The first status that is not ok, or
// ok once every run is handed to the plane.
transport::send_status ship_kv(transport::endpoint& out, const transport::peer_id& to,
                               const kv_shipment& what, std::span<const int32_t> blocks,
                               const model::kv_block_pool& pool);

} // namespace supernode::services
