#pragma once
// The checksum every pool block carries, over (namespace, key, length, data): the server
// verifies it when a block comes back from the SSD tier, and a client that copies a block out
// of the server's mapped DRAM (UB) verifies it after the copy, which catches both damage and a
// block the server evicted and overwrote while the copy ran. Four independent multiply-mix
// lanes over 8-byte words keep it near memory speed (byte-serial FNV ran at ~1 GB/s, slower than
// the copy it guards). Not cryptographic; byte-order explicit, so disk files are portable.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace supernode::services::ems {

uint64_t block_checksum(std::string_view ns, std::string_view key, std::span<const std::byte> data);

} // namespace supernode::services::ems
