#pragma once
// The frame every byte-carrying plane (shm, zmq) puts around a message:
//   magic u32 "SNOD" | version u16 | type u16 | length u32 | flags u32 | payload[length]
// little-endian, 16 bytes of header. A frame may travel in pieces (zmq parts, shm ring records)
// with large binary bodies apart from the rest (see encoded_frame.hpp); the frame is always
// their concatenation and `length` covers all of it. Nothing in a received frame is trusted:
// the header is checked against the bytes actually present and the type's own size limit
// before the payload is decoded, and a frame that fails is counted under its reason and dropped.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace supernode::transport {

inline constexpr uint32_t frame_magic = 0x444F4E53; // "SNOD" as bytes on the wire
inline constexpr uint16_t protocol_version = 1;
inline constexpr size_t frame_header_bytes = 16;

struct frame_header {
  uint32_t magic = frame_magic;
  uint16_t version = protocol_version;
  uint16_t type = 0;
  uint32_t length = 0;
  uint32_t flags = 0;
};

enum class frame_error : uint8_t {
  truncated = 0,     // fewer bytes than a header, or than the header's length
  bad_magic,         // not one of our frames (garbage)
  wrong_version,     // another protocol version
  unknown_type,      // a type id nobody registered
  oversized,         // longer than the type's limit
  trailing_bytes,    // more bytes than the header's length
  malformed_payload, // MessagePack that does not decode to the type
};
inline constexpr size_t frame_error_count = 7;
const char* to_string(frame_error e);

// Bad frames seen by one receiver, per reason; read by /metrics and by tests.
struct frame_error_counters {
  std::array<std::atomic<uint64_t>, frame_error_count> by_reason{};
  void add(frame_error e) { by_reason[static_cast<size_t>(e)].fetch_add(1); }
  uint64_t get(frame_error e) const { return by_reason[static_cast<size_t>(e)].load(); }
  uint64_t total() const;
};

void write_header(const frame_header& h, std::byte* out);
frame_header read_header(const std::byte* in);

} // namespace supernode::transport
