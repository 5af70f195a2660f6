#include "services/serving/kv_checksum.hpp"

#include "services/ems/block_checksum.hpp"

#include <string>

namespace supernode::services {

uint64_t kv_transfer_checksum(const protocol::kv_transfer& kv) {
  // Every field but the checksum itself, in a fixed order.
  const std::string header =
      kv.key.gateway + "/" + std::to_string(kv.key.id) + "/" + std::to_string(kv.first_token) +
      "/" + std::to_string(kv.prompt_tokens) + "/" + std::to_string(kv.generated_tokens) + "/" +
      std::to_string(kv.block_floats) + "/" + std::to_string(kv.first_block) + "/" +
      std::to_string(kv.block_count) + "/" + std::to_string(kv.total_blocks) + "/" +
      std::to_string(kv.mtp_first_position) + "/" +
      std::to_string(
          ems::block_checksum("mtp_following", "", std::as_bytes(std::span(kv.mtp_following)))) +
      "/" +
      std::to_string(
          ems::block_checksum("mtp_hidden", "", std::as_bytes(std::span(kv.mtp_hidden))));
  return ems::block_checksum("kv_transfer", header, kv.data.bytes());
}

} // namespace supernode::services
