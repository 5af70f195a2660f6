#pragma once
// A single-producer single-consumer ring of variable-size records in a shm segment.
//
// Layout (segment data area):
//   page 0: ring_control — capacity; head (bytes ever written, producer-owned) + data doorbell on
//           one cache line; tail (bytes ever consumed, consumer-owned) + space doorbell on another;
//           producer and consumer identities (pid, start time) for liveness checks.
//   page 1..: data[capacity], capacity a power of two.
// A record is | u32 length | u32 tag | bytes | padded to 8. Records never straddle the end: when
// one does not fit before the end, the producer writes a padding record there and starts over at
// 0, so a consumer always sees a record as one contiguous span it can decode in place. A record
// of up to capacity/2 always fits into an empty ring whatever the head position, which is why
// max_record_bytes() is capacity/2 minus the record header; larger records are too_large.
//
// head/tail are released by their owner and acquired by the other side; each side caches the
// other's index to touch the shared line only when it looks full/empty. Wake-ups spin briefly,
// then sleep on a shared futex, and the other side calls futex_wake only when a sleeper is
// registered (see doorbell in shm_sync.hpp).

#include "transport/shm_segment.hpp"
#include "transport/shm_sync.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace supernode::transport {

enum class ring_status : uint8_t { ok = 0, queue_full, too_large };
const char* to_string(ring_status s);
enum class ring_role : uint8_t { producer, consumer };

struct ring_record {
  uint32_t tag = 0;
  std::span<const std::byte> bytes;
};

inline constexpr std::chrono::microseconds default_spin{50};

class shm_ring {
public:
  static constexpr uint32_t padding_tag = 0xFFFFFFFFu; // reserved, never seen by users
  static constexpr size_t record_header_bytes = 8;

  shm_ring() = default;
  // `capacity` is rounded up to a power of two of at least 4 KiB, at most 1 GiB.
  static shm_ring create(std::string_view cluster, std::string_view name, size_t capacity,
                         ring_role role);
  static std::optional<shm_ring> try_open(std::string_view cluster, std::string_view name,
                                          ring_role role);
  static shm_ring open(std::string_view cluster, std::string_view name, ring_role role);

  size_t capacity() const { return capacity_; }
  size_t max_record_bytes() const { return capacity_ / 2 - record_header_bytes; }

  // Producer. Copies `a` then `b` into one record; never blocks. With `notify` false the caller
  // signals the consumer some other way (the shm plane rings the receiver's inbox doorbell).
  ring_status try_push(uint32_t tag, std::span<const std::byte> a,
                       std::span<const std::byte> b = {}, bool notify = true);
  // The same, gathering any number of pieces into one record: a frame goes from wherever its
  // pieces are straight into the ring, one copy.
  ring_status try_push_gather(uint32_t tag, std::span<const std::span<const std::byte>> pieces,
                              bool notify = true);
  // Waits until a record of `record_bytes` would fit; false on timeout.
  bool wait_for_space(size_t record_bytes, std::chrono::nanoseconds timeout,
                      std::chrono::nanoseconds spin = default_spin);

  // Consumer. The oldest record, valid until pop(); nothing when the ring is empty. Throws
  // shm_error when the ring's bytes are corrupt (a record header pointing outside the data).
  std::optional<ring_record> peek();
  void pop();
  bool has_data() const;
  bool wait_for_data(std::chrono::nanoseconds timeout,
                     std::chrono::nanoseconds spin = default_spin);

  // The creator's proof of who it is (the shm plane's ring MAC), in the ring's header: written
  // by the producer before it announces the ring, read by the consumer before it reads a record.
  static constexpr size_t credential_bytes = 32;
  std::span<std::byte, credential_bytes> credential();

  // Test-only: a record header pointing past the ring, as a scribbling producer would leave.
  void push_corrupt_record_for_test();

  // The process at the other end is still running (true while the other end never attached).
  bool peer_alive() const;
  const std::string& name() const { return segment_.name(); }
  shm_segment& segment() { return segment_; }

private:
  struct control;
  void attach(ring_role role);
  bool fits(size_t need, uint64_t tail) const;
  size_t padding_for(size_t need) const;

  shm_segment segment_;
  control* ctl_ = nullptr;
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
  ring_role role_ = ring_role::producer;
  uint64_t head_ = 0, tail_ = 0; // our own index (producer: head, consumer: tail)
  uint64_t cached_other_ = 0;    // last seen index of the other side
  uint64_t next_tail_ = 0;       // consumer: tail after the record returned by peek()
};

} // namespace supernode::transport
