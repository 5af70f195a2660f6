#pragma once
// Messages between roles. Each message type is a plain struct with
//   static constexpr uint16_t type_id;      unique across the project (see protocol ids)
//   static constexpr const char* type_name;
//   static constexpr uint32_t max_bytes;    the largest encoded payload a receiver accepts
//   MSGPACK_DEFINE_MAP(fields...)
// and is registered once with register_message<T>(). An envelope carries one message: the
// inproc plane hands the object itself to the receiver (no copy, no encoding); byte planes
// encode it with MessagePack inside a frame and decode it on the other side into a new object.
// Large binary fields are shared_bytes: they travel by reference where the medium allows
// (see encoded_frame.hpp) and a decoded message may reference the buffer it arrived in.

#include "transport/encoded_frame.hpp"
#include "transport/frame.hpp"
#include "transport/shared_bytes.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <msgpack.hpp>
#include <mutex>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

namespace supernode::transport {

// What a payload being decoded lives in. With an owner, shared_bytes fields reference the
// payload instead of copying it (the owner keeps it alive, so it must not be reused, as a shm ring
// would be). `spliced` are the out-of-line bodies of a multipart frame, in wire order.
struct payload_source {
  std::shared_ptr<const void> owner;
  std::span<const frame_part> spliced;
};

struct message_type_info {
  uint16_t id = 0;
  const char* name = "";
  uint32_t max_bytes = 0;
  const std::type_info* cpp_type = nullptr;
  // Packs the object (a T) as header + MessagePack; with `splice`, large shared_bytes bodies
  // stay where they are and the frame references them.
  encoded_frame (*encode)(const void* object, bool splice) = nullptr;
  // Decodes a payload of exactly `size` bytes; throws on malformed input.
  std::shared_ptr<const void> (*decode)(const char* payload, size_t size,
                                        const payload_source& source) = nullptr;
  // For a reply (a type with a `uint64_t reply_to` member): the id of the request it answers;
  // the endpoint completes that pending request with it instead of handing it to the role.
  uint64_t (*reply_to)(const void* object) = nullptr;
};

// Thread-safe: roles register their message families when they are made, possibly while other
// instances' planes already decode frames (find() on their threads), so lookups are atomic loads
// of entries that, once registered, never change.
class message_registry {
public:
  static message_registry& instance();
  // Throws std::logic_error when the id is taken by another type; registering a type again is a
  // no-op.
  void add(const message_type_info& info);
  const message_type_info* find(uint16_t id) const;

private:
  std::mutex adding_;
  std::array<std::atomic<const message_type_info*>, 65536> by_id_{};
};

class envelope {
public:
  envelope() = default;
  envelope(uint16_t type, std::shared_ptr<const void> object)
      : type_(type), object_(std::move(object)) {}

  uint16_t type() const { return type_; }
  bool empty() const { return !object_; }
  template<class T>
  bool is() const {
    return type_ == T::type_id;
  }
  // The message as T, or nullptr when it is another type.
  template<class T>
  const T* get() const {
    return is<T>() ? static_cast<const T*>(object_.get()) : nullptr;
  }
  const std::shared_ptr<const void>& object() const { return object_; }
  // Header + payload in one contiguous block (copies every body).
  byte_buffer encode() const;
  // Header + payload with large shared_bytes bodies referenced, not copied: what planes send.
  encoded_frame encode_spliced() const;

private:
  uint16_t type_ = 0;
  std::shared_ptr<const void> object_;
};

template<class T>
envelope make_envelope(T message) {
  return envelope(T::type_id, std::make_shared<const T>(std::move(message)));
}

// Validates a received frame completely and decodes its payload; on failure counts the reason
// in `errors` and returns nothing. `reason` (optional) receives a human-readable cause for logs.
// Without an owner every field is copied out of `frame`; with one, shared_bytes fields reference
// `frame` and share `owner`.
std::optional<envelope> decode_frame(std::span<const std::byte> frame, frame_error_counters& errors,
                                     std::string* reason = nullptr);
std::optional<envelope> decode_frame(std::span<const std::byte> frame,
                                     std::shared_ptr<const void> owner,
                                     frame_error_counters& errors, std::string* reason = nullptr);
// A frame received as separate parts (zmq multipart), judged as their concatenation: the header
// in the first part, its length covering every part after the header. Parts alternate head and
// body; each body must follow a head part ending in a bin32 header of exactly its size, and
// must be claimed by a shared_bytes field, which then references it. Anything else is a bad
// frame (malformed_payload). At most max_frame_parts parts.
inline constexpr size_t max_frame_parts = 129;
std::optional<envelope> decode_frame(std::span<const frame_part> parts,
                                     frame_error_counters& errors, std::string* reason = nullptr);

// MessagePack limits for decoding: no array, map, string or binary larger than the frame.
msgpack::unpack_limit unpack_limits_for(size_t payload_bytes);

// Lets the unpacker point strings and binaries into the payload instead of copying them into
// its zone first: convert() copies them into the message, or references the payload when the
// decode has its owner (shared_bytes).
inline bool unpack_in_place(msgpack::type::object_type type, std::size_t, void*) {
  return type == msgpack::type::BIN || type == msgpack::type::STR;
}

template<class T>
void register_message() {
  message_type_info info;
  info.id = T::type_id;
  info.name = T::type_name;
  info.max_bytes = T::max_bytes;
  info.cpp_type = &typeid(T);
  info.encode = [](const void* object, bool splice) {
    frame_writer out(splice);
    out.write("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", frame_header_bytes); // header placeholder
    {
      frame_writer::active_scope scope(out);
      msgpack::pack(out, *static_cast<const T*>(object));
    }
    auto frame = out.release();
    frame_header h;
    h.type = T::type_id;
    h.length = static_cast<uint32_t>(frame.size() - frame_header_bytes);
    write_header(h, reinterpret_cast<std::byte*>(frame.head.data.get()));
    return frame;
  };
  info.decode = [](const char* payload, size_t size,
                   const payload_source& source) -> std::shared_ptr<const void> {
    size_t offset = 0;
    auto handle =
        msgpack::unpack(payload, size, offset, &unpack_in_place, nullptr, unpack_limits_for(size));
    if (offset != size) throw msgpack::unpack_error("trailing bytes after the payload");
    auto object = std::make_shared<T>();
    detail::bytes_decode_scope scope(payload, size, source.owner, source.spliced);
    handle.get().convert(*object);
    if (!scope.all_spliced_used())
      throw msgpack::unpack_error("an out-of-line part no field claims");
    return object;
  };
  if constexpr (requires(const T& t) { uint64_t{t.reply_to}; })
    info.reply_to = [](const void* object) { return static_cast<const T*>(object)->reply_to; };
  message_registry::instance().add(info);
}

} // namespace supernode::transport
