#pragma once
// FNV-1a over bytes: the checksum bulk_ack carries, so a sender knows its transfer arrived
// intact. Not cryptographic; it catches truncation, reordering and corruption in tests.

#include <cstddef>
#include <cstdint>

namespace supernode::transport {

inline uint64_t fnv1a(const char* data, size_t size, uint64_t h = 0xcbf29ce484222325ull) {
  for (size_t i = 0; i < size; ++i)
    h = (h ^ static_cast<unsigned char>(data[i])) * 0x100000001b3ull;
  return h;
}

} // namespace supernode::transport
