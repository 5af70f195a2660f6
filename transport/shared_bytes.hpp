#pragma once
// Immutable bytes with shared ownership: a span plus whatever keeps it alive (a vector the
// sender handed over, a received zmq message, a reassembly buffer). Copying one copies a pointer,
// so a payload can be echoed, queued on several planes or kept by a handler without touching
// its bytes. MessagePack sees it as BIN. On encode, a frame_writer that splices takes a large one
// by reference (the plane sends it from where it is); on decode, a BIN that lies inside a buffer
// the decoder was given an owner for is referenced, not copied. Nothing else changes on the wire.

#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <msgpack.hpp>
#include <span>
#include <type_traits>
#include <vector>

namespace supernode::transport {

class shared_bytes {
public:
  shared_bytes() = default;
  // Takes the vector over without copying its bytes.
  shared_bytes(std::vector<char> bytes);
  shared_bytes(std::initializer_list<char> bytes) : shared_bytes(std::vector<char>(bytes)) {}
  // Bytes inside something `owner` keeps alive.
  shared_bytes(std::shared_ptr<const void> owner, const char* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  static shared_bytes copy_of(const void* data, size_t size);

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const char* begin() const { return data_; }
  const char* end() const { return data_ + size_; }
  char operator[](size_t i) const { return data_[i]; }
  std::span<const std::byte> bytes() const { return std::as_bytes(std::span(data_, size_)); }
  std::vector<char> to_vector() const { return {begin(), end()}; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

  friend bool operator==(const shared_bytes& a, const shared_bytes& b) {
    return a.size_ == b.size_ && (a.size_ == 0 || std::memcmp(a.data_, b.data_, a.size_) == 0);
  }

private:
  std::shared_ptr<const void> owner_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// A piece of a received frame and what keeps its bytes alive (null: nothing does beyond the
// decode call, so fields that would reference it copy instead).
struct frame_part {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;
};

class frame_writer;

namespace detail {

// Set by register_message's encode while a frame_writer that splices is being packed into:
// takes `b` by reference when it is large enough and answers whether it did.
bool splice_into_active_writer(const shared_bytes& b);

// The payload being decoded on this thread, so shared_bytes fields can reference it. Only
// register_message's decode opens one; it must close before the thread decodes anything else.
class bytes_decode_scope {
public:
  bytes_decode_scope(const char* payload, size_t size, std::shared_ptr<const void> owner,
                     std::span<const frame_part> spliced);
  ~bytes_decode_scope();
  bytes_decode_scope(const bytes_decode_scope&) = delete;
  bytes_decode_scope& operator=(const bytes_decode_scope&) = delete;
  // Every out-of-line part was claimed by exactly one field.
  bool all_spliced_used() const;

  const char* begin;
  const char* end;
  std::shared_ptr<const void> owner;
  std::span<const frame_part> spliced;
  std::vector<bool> used;

private:
  bytes_decode_scope* previous_;
};

// What a BIN (or STR, or the receiver's splice marker) decodes to; throws msgpack::type_error.
shared_bytes bytes_from_object(const msgpack::object& o);

// The ext type a receiver writes in place of an out-of-line body while it decodes a multipart
// frame (fixext1, data = the body's index). Never valid on the wire: frames carrying it by
// themselves fail to decode.
inline constexpr int8_t splice_ext_type = 0x53;

} // namespace detail
} // namespace supernode::transport

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template<>
  struct convert<supernode::transport::shared_bytes> {
    const msgpack::object& operator()(const msgpack::object& o,
                                      supernode::transport::shared_bytes& v) const {
      v = supernode::transport::detail::bytes_from_object(o);
      return o;
    }
  };

  template<>
  struct pack<supernode::transport::shared_bytes> {
    template<typename Stream>
    msgpack::packer<Stream>& operator()(msgpack::packer<Stream>& o,
                                        const supernode::transport::shared_bytes& v) const {
      if constexpr (std::is_same_v<Stream, supernode::transport::frame_writer>)
        if (supernode::transport::detail::splice_into_active_writer(v)) return o;
      const auto n = static_cast<uint32_t>(v.size());
      o.pack_bin(n);
      o.pack_bin_body(v.data(), n);
      return o;
    }
  };

  } // namespace adaptor
} // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
} // namespace msgpack
