#include "transport/frame.hpp"

#include <cstring>

namespace supernode::transport {

const char* to_string(frame_error e) {
  switch (e) {
  case frame_error::truncated:
    return "truncated";
  case frame_error::bad_magic:
    return "bad_magic";
  case frame_error::wrong_version:
    return "wrong_version";
  case frame_error::unknown_type:
    return "unknown_type";
  case frame_error::oversized:
    return "oversized";
  case frame_error::trailing_bytes:
    return "trailing_bytes";
  case frame_error::malformed_payload:
    return "malformed_payload";
  }
  return "unknown";
}

uint64_t frame_error_counters::total() const {
  uint64_t n = 0;
  for (auto& c : by_reason) n += c.load();
  return n;
}

// x86-64 and every target we build for is little-endian, as the wire format is.
void write_header(const frame_header& h, std::byte* out) {
  std::memcpy(out, &h.magic, 4);
  std::memcpy(out + 4, &h.version, 2);
  std::memcpy(out + 6, &h.type, 2);
  std::memcpy(out + 8, &h.length, 4);
  std::memcpy(out + 12, &h.flags, 4);
}

frame_header read_header(const std::byte* in) {
  frame_header h;
  std::memcpy(&h.magic, in, 4);
  std::memcpy(&h.version, in + 4, 2);
  std::memcpy(&h.type, in + 6, 2);
  std::memcpy(&h.length, in + 8, 4);
  std::memcpy(&h.flags, in + 12, 4);
  return h;
}

} // namespace supernode::transport
