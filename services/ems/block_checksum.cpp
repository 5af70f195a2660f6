#include "services/ems/block_checksum.hpp"

#include <cstring>

namespace supernode::services::ems {

namespace {

constexpr uint64_t prime1 = 0x9e3779b185ebca87ull;
constexpr uint64_t prime2 = 0xc2b2ae3d27d4eb4full;

inline uint64_t load_le64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

inline uint64_t rotl(uint64_t v, int r) {
  return (v << r) | (v >> (64 - r));
}

inline uint64_t round(uint64_t acc, uint64_t word) {
  return rotl(acc + word * prime2, 31) * prime1;
}

inline uint64_t finish(uint64_t h) {
  h ^= h >> 33;
  h *= prime2;
  h ^= h >> 29;
  h *= prime1;
  return h ^ (h >> 32);
}

uint64_t hash_bytes(std::span<const std::byte> data, uint64_t seed) {
  const std::byte* p = data.data();
  size_t n = data.size();
  uint64_t a = seed + prime1 + prime2, b = seed + prime2, c = seed, d = seed - prime1;
  for (; n >= 32; p += 32, n -= 32) {
    a = round(a, load_le64(p));
    b = round(b, load_le64(p + 8));
    c = round(c, load_le64(p + 16));
    d = round(d, load_le64(p + 24));
  }
  uint64_t h = rotl(a, 1) + rotl(b, 7) + rotl(c, 12) + rotl(d, 18) + data.size();
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, load_le64(p)), 27) * prime1 + prime2;
  for (; n > 0; ++p, --n) h = rotl(h ^ (static_cast<uint64_t>(*p) * prime1), 11) * prime2;
  return finish(h);
}

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

} // namespace

uint64_t block_checksum(std::string_view ns, std::string_view key,
                        std::span<const std::byte> data) {
  // Lengths go into the seeds, so ("ab", "c") and ("a", "bc") differ.
  uint64_t h = hash_bytes(as_bytes(ns), ns.size());
  h = hash_bytes(as_bytes(key), h ^ (key.size() * prime1));
  return hash_bytes(data, h ^ (data.size() * prime2));
}

} // namespace supernode::services::ems
