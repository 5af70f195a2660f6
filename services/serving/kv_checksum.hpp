#pragma once
// The checksum a KV transfer carries from prefill to decode, over its header fields and its
// blocks: a frame damaged on a plane without integrity checks (zmq without CURVE; the fault
// injector's `corrupt`) that still decodes would otherwise become wrong KV and wrong tokens.
// The decode instance refuses a transfer whose checksum differs with a retryable error, so the
// gateway places the request again. Not cryptographic (CURVE and the shm MACs are the defence
// against an attacker); the pool's block checksum, at near memory speed.

#include "services/protocol/serving_messages.hpp"

#include <cstdint>

namespace supernode::services {

uint64_t kv_transfer_checksum(const protocol::kv_transfer& kv);

} // namespace supernode::services
