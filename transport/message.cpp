#include "transport/message.hpp"

#include <algorithm>
#include <new>
#include <stdexcept>

namespace supernode::transport {

message_registry& message_registry::instance() {
  static message_registry r;
  return r;
}

void message_registry::add(const message_type_info& info) {
  if (by_id_.size() <= info.id)
    by_id_.resize(info.id + 1);
  auto& slot = by_id_[info.id];
  if (slot && slot->cpp_type != info.cpp_type && *slot->cpp_type != *info.cpp_type)
    throw std::logic_error(std::string("message type id ") + std::to_string(info.id) +
                           " is taken by " + slot->name + ", cannot register " + info.name);
  slot = info;
}

const message_type_info* message_registry::find(uint16_t id) const {
  return id < by_id_.size() && by_id_[id] ? &*by_id_[id] : nullptr;
}

byte_buffer envelope::encode() const {
  const auto* info = message_registry::instance().find(type_);
  if (!info)
    throw std::logic_error("message type " + std::to_string(type_) + " is not registered");
  return info->encode(object_.get());
}

frame_writer::frame_writer() : data_(static_cast<char*>(std::malloc(512))), capacity_(512) {
  if (!data_)
    throw std::bad_alloc();
}

void frame_writer::grow(size_t needed) {
  // Doubling keeps many small writes cheap; a write larger than that gets its size plus room
  // for the fields that may follow it.
  const size_t capacity = std::max(capacity_ * 2, needed + 4096);
  auto* bigger = static_cast<char*>(std::realloc(data_, capacity));
  if (!bigger)
    throw std::bad_alloc();
  data_ = bigger;
  capacity_ = capacity;
}

byte_buffer frame_writer::release() {
  byte_buffer b;
  b.size = size_;
  b.data.reset(data_);
  data_ = nullptr;
  size_ = capacity_ = 0;
  return b;
}

msgpack::unpack_limit unpack_limits_for(size_t payload_bytes) {
  // No container can hold more elements than the payload has bytes; depth 32 is plenty for
  // our structs and stops stack exhaustion by nesting.
  const auto n = static_cast<std::size_t>(payload_bytes);
  return msgpack::unpack_limit(n, n, n, n, n, 32);
}

std::optional<envelope> decode_frame(std::span<const std::byte> frame, frame_error_counters& errors,
                                     std::string* reason) {
  auto fail = [&](frame_error e, const std::string& why) -> std::optional<envelope> {
    errors.add(e);
    if (reason)
      *reason = std::string(to_string(e)) + ": " + why;
    return std::nullopt;
  };
  if (frame.size() < frame_header_bytes)
    return fail(frame_error::truncated, std::to_string(frame.size()) + " bytes, no full header");
  const frame_header h = read_header(frame.data());
  if (h.magic != frame_magic)
    return fail(frame_error::bad_magic, "magic does not match");
  if (h.version != protocol_version)
    return fail(frame_error::wrong_version, "version " + std::to_string(h.version) + ", expected " +
                                                std::to_string(protocol_version));
  const auto* info = message_registry::instance().find(h.type);
  if (!info)
    return fail(frame_error::unknown_type, "type " + std::to_string(h.type));
  if (h.length > info->max_bytes)
    return fail(frame_error::oversized, std::string(info->name) + " of " +
                                            std::to_string(h.length) + " bytes, limit " +
                                            std::to_string(info->max_bytes));
  const size_t body = frame.size() - frame_header_bytes;
  if (body < h.length)
    return fail(frame_error::truncated, std::string(info->name) + " header says " +
                                            std::to_string(h.length) + " bytes, " +
                                            std::to_string(body) + " present");
  if (body > h.length)
    return fail(frame_error::trailing_bytes, std::to_string(body - h.length) + " bytes after " +
                                                 info->name);
  try {
    auto object = info->decode(reinterpret_cast<const char*>(frame.data()) + frame_header_bytes,
                               h.length);
    return envelope(h.type, std::move(object));
  } catch (const std::exception& e) {
    return fail(frame_error::malformed_payload, std::string(info->name) + ": " + e.what());
  }
}

} // namespace supernode::transport
