#include "transport/message.hpp"

#include <algorithm>
#include <mutex>
#include <new>
#include <stdexcept>

namespace supernode::transport {

message_registry& message_registry::instance() {
  static message_registry r;
  return r;
}

void message_registry::add(const message_type_info& info) {
  std::lock_guard lock(adding_);
  const message_type_info* old = by_id_[info.id].load(std::memory_order_acquire);
  if (old) {
    if (old->cpp_type != info.cpp_type && *old->cpp_type != *info.cpp_type)
      throw std::logic_error(std::string("message type id ") + std::to_string(info.id) +
                             " is taken by " + old->name + ", cannot register " + info.name);
    return; // registered already (every role registers the families it uses)
  }
  // Entries are never freed or replaced: a plane thread may be reading one right now.
  by_id_[info.id].store(new message_type_info(info), std::memory_order_release);
}

const message_type_info* message_registry::find(uint16_t id) const {
  return by_id_[id].load(std::memory_order_acquire);
}

namespace {
const message_type_info& info_for(uint16_t type) {
  const auto* info = message_registry::instance().find(type);
  if (!info) throw std::logic_error("message type " + std::to_string(type) + " is not registered");
  return *info;
}
} // namespace

byte_buffer envelope::encode() const {
  auto frame = info_for(type_).encode(object_.get(), false);
  return std::move(frame.head);
}

encoded_frame envelope::encode_spliced() const {
  return info_for(type_).encode(object_.get(), true);
}

msgpack::unpack_limit unpack_limits_for(size_t payload_bytes) {
  // No container can hold more elements than the payload has bytes; depth 32 is plenty for
  // our structs and stops stack exhaustion by nesting.
  const auto n = static_cast<std::size_t>(payload_bytes);
  return msgpack::unpack_limit(n, n, n, n, n, 32);
}

namespace {

struct frame_judge {
  frame_error_counters& errors;
  std::string* reason;

  std::optional<envelope> fail(frame_error e, const std::string& why) {
    errors.add(e);
    if (reason) *reason = std::string(to_string(e)) + ": " + why;
    return std::nullopt;
  }

  const message_type_info* reject(frame_error e, const std::string& why) {
    fail(e, why);
    return nullptr;
  }

  // Checks the header in `first` against `total` bytes received; the type's info, or nothing
  // (counted) when the frame is bad.
  const message_type_info* check_header(std::span<const std::byte> first, size_t total,
                                        frame_header& h) {
    if (first.size() < frame_header_bytes)
      return reject(frame_error::truncated,
                    std::to_string(first.size()) + " bytes, no full header");
    h = read_header(first.data());
    if (h.magic != frame_magic) return reject(frame_error::bad_magic, "magic does not match");
    if (h.version != protocol_version)
      return reject(frame_error::wrong_version, "version " + std::to_string(h.version) +
                                                    ", expected " +
                                                    std::to_string(protocol_version));
    const auto* info = message_registry::instance().find(h.type);
    if (!info) return reject(frame_error::unknown_type, "type " + std::to_string(h.type));
    if (h.length > info->max_bytes)
      return reject(frame_error::oversized, std::string(info->name) + " of " +
                                                std::to_string(h.length) + " bytes, limit " +
                                                std::to_string(info->max_bytes));
    const size_t body = total - frame_header_bytes;
    if (body < h.length)
      return reject(frame_error::truncated, std::string(info->name) + " header says " +
                                                std::to_string(h.length) + " bytes, " +
                                                std::to_string(body) + " present");
    if (body > h.length)
      return reject(frame_error::trailing_bytes,
                    std::to_string(body - h.length) + " bytes after " + info->name);
    return info;
  }

  std::optional<envelope> decode(const message_type_info& info, uint16_t type, const char* payload,
                                 size_t size, const payload_source& source) {
    try {
      return envelope(type, info.decode(payload, size, source));
    } catch (const std::exception& e) {
      return fail(frame_error::malformed_payload, std::string(info.name) + ": " + e.what());
    }
  }
};

uint32_t read_be32(const std::byte* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

} // namespace

std::optional<envelope> decode_frame(std::span<const std::byte> frame, frame_error_counters& errors,
                                     std::string* reason) {
  return decode_frame(frame, nullptr, errors, reason);
}

std::optional<envelope> decode_frame(std::span<const std::byte> frame,
                                     std::shared_ptr<const void> owner,
                                     frame_error_counters& errors, std::string* reason) {
  frame_judge judge{errors, reason};
  frame_header h;
  const auto* info = judge.check_header(frame, frame.size(), h);
  if (!info) return std::nullopt;
  return judge.decode(*info, h.type,
                      reinterpret_cast<const char*>(frame.data()) + frame_header_bytes, h.length,
                      payload_source{std::move(owner), {}});
}

std::optional<envelope> decode_frame(std::span<const frame_part> parts,
                                     frame_error_counters& errors, std::string* reason) {
  if (parts.size() == 1) return decode_frame(parts[0].bytes, parts[0].owner, errors, reason);
  frame_judge judge{errors, reason};
  if (parts.empty()) return judge.fail(frame_error::truncated, "no parts");
  size_t total = 0;
  for (auto& p : parts) total += p.bytes.size();
  frame_header h;
  const auto* info = judge.check_header(parts[0].bytes, total, h);
  if (!info) return std::nullopt;
  if (parts.size() > max_frame_parts)
    return judge.fail(frame_error::malformed_payload,
                      std::string(info->name) + " in " + std::to_string(parts.size()) + " parts");
  // The head parts, each body replaced by a 3-byte marker (fixext1 holding its index) where its
  // bin32 header was; the bodies stay in their parts and the decoded fields reference them.
  std::vector<char> skeleton;
  std::vector<frame_part> bodies;
  size_t head_bytes = 0;
  for (size_t i = 0; i < parts.size(); i += 2) head_bytes += parts[i].bytes.size();
  skeleton.reserve(head_bytes + parts.size() * 2);
  for (size_t i = 0; i < parts.size(); i += 2) {
    auto head = parts[i].bytes;
    if (i == 0) head = head.subspan(frame_header_bytes);
    if (i + 1 < parts.size()) {
      const auto& body = parts[i + 1];
      if (head.size() < 5 || head[head.size() - 5] != std::byte{0xc6} ||
          read_be32(head.data() + head.size() - 4) != body.bytes.size())
        return judge.fail(frame_error::malformed_payload,
                          std::string(info->name) + ": part " + std::to_string(i + 1) +
                              " does not follow a bin32 header of its size");
      head = head.first(head.size() - 5);
      const auto* p = reinterpret_cast<const char*>(head.data());
      skeleton.insert(skeleton.end(), p, p + head.size());
      skeleton.push_back(char(0xd4));
      skeleton.push_back(char(detail::splice_ext_type));
      skeleton.push_back(char(bodies.size()));
      bodies.push_back(body);
    } else {
      const auto* p = reinterpret_cast<const char*>(head.data());
      skeleton.insert(skeleton.end(), p, p + head.size());
    }
  }
  return judge.decode(*info, h.type, skeleton.data(), skeleton.size(),
                      payload_source{nullptr, bodies});
}

} // namespace supernode::transport
