#pragma once
// An encoded frame as the byte planes send it: the header and MessagePack in one owned block,
// with the bodies of large shared_bytes fields left where they are (spliced). On the wire the
// frame is the concatenation — head up to the first splice point, first body, head up to the
// next, ... — exactly the bytes a contiguous encoding would have; only a referenced body's BIN
// header is always the 5-byte bin32 form, so a receiver of separate parts can find it.

#include "transport/shared_bytes.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

namespace supernode::transport {

// An owned, contiguous byte buffer that can be handed to ZeroMQ without a copy.
struct byte_buffer {
  std::unique_ptr<char, void (*)(void*)> data{nullptr, &std::free};
  size_t size = 0;
  std::span<const std::byte> bytes() const {
    return {reinterpret_cast<const std::byte*>(data.get()), size};
  }
};

// Bodies smaller than this are copied into the head: below it a separate part or piece costs
// more than the copy it saves.
inline constexpr size_t splice_min_bytes = size_t{32} << 10;

struct encoded_frame {
  struct splice {
    size_t at = 0; // offset in `head` where the body goes
    shared_bytes body;
  };
  byte_buffer head;
  std::vector<splice> splices; // in increasing `at`

  size_t size() const;
  // The frame's bytes in wire order, as views into head and bodies (no empty pieces).
  std::vector<std::span<const std::byte>> pieces() const;
  // One contiguous copy, for code that wants plain bytes (tests, forwarding).
  byte_buffer flatten() const;
};

// Collects an encoded frame in one malloc'd block (a msgpack stream). Unlike msgpack::sbuffer,
// which doubles, a large write grows the block just enough: a 16 MiB payload is not packed into
// a 32 MiB block, which glibc always maps fresh and so pays a page fault per 4 KiB touched.
// With splicing on, large shared_bytes bodies are recorded instead of copied.
class frame_writer {
public:
  explicit frame_writer(bool splicing = false);
  ~frame_writer() { std::free(data_); }
  frame_writer(const frame_writer&) = delete;
  frame_writer& operator=(const frame_writer&) = delete;
  void write(const char* bytes, size_t n) {
    if (n == 0) return; // an empty BIN may come with a null pointer, which memcpy must not see
    if (size_ + n > capacity_) grow(size_ + n);
    std::memcpy(data_ + size_, bytes, n);
    size_ += n;
  }
  // A bin32 header into the head and the body by reference; false when splicing is off or the
  // body is small.
  bool splice(const shared_bytes& body);
  char* data() { return data_; }
  size_t size() const { return size_; }
  encoded_frame release();

  // Makes this writer the one shared_bytes fields splice into while packing on this thread.
  class active_scope {
  public:
    explicit active_scope(frame_writer& w);
    ~active_scope();
    active_scope(const active_scope&) = delete;
    active_scope& operator=(const active_scope&) = delete;

  private:
    frame_writer* previous_;
  };

private:
  void grow(size_t needed);
  char* data_;
  size_t size_ = 0, capacity_;
  bool splicing_;
  std::vector<encoded_frame::splice> splices_;
};

} // namespace supernode::transport
