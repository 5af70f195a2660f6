#pragma once
// Messages between roles. Each message type is a plain struct with
//   static constexpr uint16_t type_id;      unique across the project (see protocol ids)
//   static constexpr const char* type_name;
//   static constexpr uint32_t max_bytes;    the largest encoded payload a receiver accepts
//   MSGPACK_DEFINE_MAP(fields...)
// and is registered once with register_message<T>(). An envelope carries one message: the
// inproc plane hands the object itself to the receiver (no copy, no encoding); byte planes
// encode it with MessagePack inside a frame and decode it on the other side into a new object.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include "transport/frame.hpp"

namespace supernode::transport {

// An owned, contiguous byte buffer that can be handed to ZeroMQ without a copy.
struct byte_buffer {
  std::unique_ptr<char, void (*)(void*)> data{nullptr, &std::free};
  size_t size = 0;
  std::span<const std::byte> bytes() const {
    return {reinterpret_cast<const std::byte*>(data.get()), size};
  }
};

struct message_type_info {
  uint16_t id = 0;
  const char* name = "";
  uint32_t max_bytes = 0;
  const std::type_info* cpp_type = nullptr;
  // Packs the object (a T) as header + MessagePack payload into one buffer.
  byte_buffer (*encode)(const void* object) = nullptr;
  // Decodes a payload of exactly `size` bytes; throws on malformed input.
  std::shared_ptr<const void> (*decode)(const char* payload, size_t size) = nullptr;
};

class message_registry {
public:
  static message_registry& instance();
  // Throws std::logic_error when the id is taken by another type.
  void add(const message_type_info& info);
  const message_type_info* find(uint16_t id) const;

private:
  std::vector<std::optional<message_type_info>> by_id_;
};

class envelope {
public:
  envelope() = default;
  envelope(uint16_t type, std::shared_ptr<const void> object) : type_(type), object_(std::move(object)) {}

  uint16_t type() const { return type_; }
  bool empty() const { return !object_; }
  template <class T>
  bool is() const { return type_ == T::type_id; }
  // The message as T, or nullptr when it is another type.
  template <class T>
  const T* get() const { return is<T>() ? static_cast<const T*>(object_.get()) : nullptr; }
  const std::shared_ptr<const void>& object() const { return object_; }
  // Header + payload, ready for a byte plane.
  byte_buffer encode() const;

private:
  uint16_t type_ = 0;
  std::shared_ptr<const void> object_;
};

template <class T>
envelope make_envelope(T message) {
  return envelope(T::type_id, std::make_shared<const T>(std::move(message)));
}

// Validates a received frame completely and decodes its payload; on failure counts the reason
// in `errors` and returns nothing. `reason` (optional) receives a human-readable cause for logs.
std::optional<envelope> decode_frame(std::span<const std::byte> frame, frame_error_counters& errors,
                                     std::string* reason = nullptr);

// MessagePack limits for decoding: no array, map, string or binary larger than the frame.
msgpack::unpack_limit unpack_limits_for(size_t payload_bytes);

// Collects an encoded frame in one malloc'd block (a msgpack stream). Unlike msgpack::sbuffer,
// which doubles, a large write grows the block just enough: a 16 MiB payload is not packed into
// a 32 MiB block, which glibc always maps fresh and so pays a page fault per 4 KiB touched.
class frame_writer {
public:
  frame_writer();
  ~frame_writer() { std::free(data_); }
  frame_writer(const frame_writer&) = delete;
  frame_writer& operator=(const frame_writer&) = delete;
  void write(const char* bytes, size_t n) {
    if (size_ + n > capacity_)
      grow(size_ + n);
    std::memcpy(data_ + size_, bytes, n);
    size_ += n;
  }
  char* data() { return data_; }
  size_t size() const { return size_; }
  byte_buffer release();

private:
  void grow(size_t needed);
  char* data_;
  size_t size_ = 0, capacity_;
};

// Lets the unpacker point strings and binaries into the payload instead of copying them into
// its zone first: convert() copies them into the message anyway, and the payload outlives it.
inline bool unpack_in_place(msgpack::type::object_type type, std::size_t, void*) {
  return type == msgpack::type::BIN || type == msgpack::type::STR;
}

template <class T>
void register_message() {
  message_type_info info;
  info.id = T::type_id;
  info.name = T::type_name;
  info.max_bytes = T::max_bytes;
  info.cpp_type = &typeid(T);
  info.encode = [](const void* object) {
    frame_writer out;
    out.write("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", frame_header_bytes); // header placeholder
    msgpack::pack(out, *static_cast<const T*>(object));
    frame_header h;
    h.type = T::type_id;
    h.length = static_cast<uint32_t>(out.size() - frame_header_bytes);
    write_header(h, reinterpret_cast<std::byte*>(out.data()));
    return out.release();
  };
  info.decode = [](const char* payload, size_t size) -> std::shared_ptr<const void> {
    size_t offset = 0;
    auto handle = msgpack::unpack(payload, size, offset, &unpack_in_place, nullptr,
                                  unpack_limits_for(size));
    if (offset != size)
      throw msgpack::unpack_error("trailing bytes after the payload");
    auto object = std::make_shared<T>();
    handle.get().convert(*object);
    return object;
  };
  message_registry::instance().add(info);
}

} // namespace supernode::transport
