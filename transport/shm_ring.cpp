#include "transport/shm_ring.hpp"

#include <atomic>
#include <bit>
#include <cstring>
#include <unistd.h>

namespace supernode::transport {

namespace {
constexpr uint64_t ring_magic = 0x474E4952444F4E53ull; // "SNODRING"
constexpr size_t data_offset = 4096;
size_t align8(size_t n) {
  return (n + 7) & ~size_t{7};
}
} // namespace

struct shm_ring::control {
  uint64_t magic;
  uint64_t capacity;
  alignas(64) std::atomic<uint64_t> head;
  doorbell data_bell;
  alignas(64) std::atomic<uint64_t> tail;
  doorbell space_bell;
  alignas(64) std::atomic<int32_t> pid[2]; // by ring_role
  std::atomic<uint64_t> start[2];
  alignas(64) std::byte credential[credential_bytes];
};

const char* to_string(ring_status s) {
  switch (s) {
  case ring_status::ok:
    return "ok";
  case ring_status::queue_full:
    return "queue_full";
  case ring_status::too_large:
    return "too_large";
  }
  return "unknown";
}

shm_ring shm_ring::create(std::string_view cluster, std::string_view name, size_t capacity,
                          ring_role role) {
  capacity = std::bit_ceil(std::max<size_t>(capacity, 4096));
  if (capacity > (size_t{1} << 30))
    throw std::invalid_argument("shm ring " + std::string(name) + ": capacity over 1 GiB");
  static_assert(sizeof(control) <= data_offset);
  shm_ring r;
  r.segment_ = shm_segment::create(cluster, name, segment_kind::ring, data_offset + capacity);
  r.ctl_ = new (r.segment_.data()) control{};
  r.ctl_->capacity = capacity;
  r.ctl_->magic = ring_magic; // published by the segment magic, which openers check first
  r.data_ = r.segment_.data() + data_offset;
  r.capacity_ = capacity;
  r.attach(role);
  return r;
}

std::optional<shm_ring> shm_ring::try_open(std::string_view cluster, std::string_view name,
                                           ring_role role) {
  auto seg = shm_segment::try_open(cluster, name, segment_kind::ring);
  if (!seg) return std::nullopt;
  auto* ctl = reinterpret_cast<control*>(seg->data());
  const size_t room = seg->data_bytes();
  if (room < data_offset || ctl->magic != ring_magic || !std::has_single_bit(ctl->capacity) ||
      ctl->capacity != room - data_offset)
    throw shm_error("shm ring " + seg->name() + ": bad ring header (capacity " +
                    std::to_string(ctl->capacity) + ", " + std::to_string(room) + " data bytes)");
  shm_ring r;
  r.segment_ = std::move(*seg);
  r.ctl_ = ctl;
  r.data_ = r.segment_.data() + data_offset;
  r.capacity_ = ctl->capacity;
  r.attach(role);
  return r;
}

shm_ring shm_ring::open(std::string_view cluster, std::string_view name, ring_role role) {
  auto r = try_open(cluster, name, role);
  if (!r) throw shm_error("shm ring " + shm_segment::full_name(cluster, name) + " does not exist");
  return std::move(*r);
}

void shm_ring::attach(ring_role role) {
  role_ = role;
  const auto i = static_cast<size_t>(role);
  ctl_->start[i].store(process_start_time(getpid()), std::memory_order_relaxed);
  ctl_->pid[i].store(getpid(), std::memory_order_release);
  head_ = ctl_->head.load(std::memory_order_acquire);
  tail_ = next_tail_ = ctl_->tail.load(std::memory_order_acquire);
  cached_other_ = role == ring_role::producer ? tail_ : head_;
  if (role == ring_role::producer) tail_ = cached_other_;
}

std::span<std::byte, shm_ring::credential_bytes> shm_ring::credential() {
  return std::span<std::byte, credential_bytes>(ctl_->credential, credential_bytes);
}

void shm_ring::push_corrupt_record_for_test() {
  const uint32_t hdr[2] = {static_cast<uint32_t>(capacity_), 0};
  std::memcpy(data_ + (head_ & (capacity_ - 1)), hdr, sizeof hdr);
  head_ += align8(record_header_bytes);
  ctl_->head.store(head_, std::memory_order_release);
  ctl_->data_bell.ring();
}

bool shm_ring::peer_alive() const {
  const auto other =
      static_cast<size_t>(role_ == ring_role::producer ? ring_role::consumer : ring_role::producer);
  const pid_t pid = ctl_->pid[other].load(std::memory_order_acquire);
  return pid == 0 || process_alive(pid, ctl_->start[other].load(std::memory_order_relaxed));
}

size_t shm_ring::padding_for(size_t need) const {
  const size_t pos = head_ & (capacity_ - 1);
  return pos + need > capacity_ ? capacity_ - pos : 0;
}

bool shm_ring::fits(size_t need, uint64_t tail) const {
  return head_ + padding_for(need) + need - tail <= capacity_;
}

ring_status shm_ring::try_push(uint32_t tag, std::span<const std::byte> a,
                               std::span<const std::byte> b, bool notify) {
  const std::span<const std::byte> pieces[2] = {a, b};
  return try_push_gather(tag, pieces, notify);
}

ring_status shm_ring::try_push_gather(uint32_t tag,
                                      std::span<const std::span<const std::byte>> pieces,
                                      bool notify) {
  size_t n = 0;
  for (auto piece : pieces) n += piece.size();
  if (n > max_record_bytes()) return ring_status::too_large;
  const size_t need = align8(record_header_bytes + n);
  if (!fits(need, cached_other_)) {
    cached_other_ = ctl_->tail.load(std::memory_order_acquire);
    if (!fits(need, cached_other_)) return ring_status::queue_full;
  }
  if (const size_t pad = padding_for(need)) {
    const uint32_t hdr[2] = {static_cast<uint32_t>(pad - record_header_bytes), padding_tag};
    std::memcpy(data_ + (head_ & (capacity_ - 1)), hdr, sizeof hdr);
    head_ += pad;
  }
  std::byte* p = data_ + (head_ & (capacity_ - 1));
  const uint32_t hdr[2] = {static_cast<uint32_t>(n), tag};
  std::memcpy(p, hdr, sizeof hdr);
  p += record_header_bytes;
  for (auto piece : pieces) {
    if (!piece.empty()) std::memcpy(p, piece.data(), piece.size());
    p += piece.size();
  }
  head_ += need;
  ctl_->head.store(head_, std::memory_order_release);
  if (notify) ctl_->data_bell.ring();
  return ring_status::ok;
}

bool shm_ring::wait_for_space(size_t record_bytes, std::chrono::nanoseconds timeout,
                              std::chrono::nanoseconds spin) {
  const size_t need = align8(record_header_bytes + record_bytes);
  return ctl_->space_bell.wait(
      [&] {
        cached_other_ = ctl_->tail.load(std::memory_order_acquire);
        return fits(need, cached_other_);
      },
      spin, std::chrono::steady_clock::now() + timeout);
}

bool shm_ring::has_data() const {
  return ctl_->head.load(std::memory_order_acquire) != tail_;
}

std::optional<ring_record> shm_ring::peek() {
  for (;;) {
    if (tail_ == cached_other_) {
      cached_other_ = ctl_->head.load(std::memory_order_acquire);
      if (tail_ == cached_other_) return std::nullopt;
    }
    const size_t pos = tail_ & (capacity_ - 1);
    uint32_t hdr[2];
    std::memcpy(hdr, data_ + pos, sizeof hdr);
    const size_t need = align8(record_header_bytes + hdr[0]);
    // The producer is another process: a record must stay inside the written bytes and
    // inside the buffer, or the ring is corrupt and nothing after it can be trusted.
    if (pos + need > capacity_ || tail_ + need > cached_other_ ||
        (hdr[1] != padding_tag && hdr[0] > max_record_bytes()))
      throw shm_error("shm ring " + name() + " is corrupt: record of " + std::to_string(hdr[0]) +
                      " bytes at offset " + std::to_string(pos));
    if (hdr[1] == padding_tag) {
      tail_ += need;
      next_tail_ = tail_;
      continue;
    }
    next_tail_ = tail_ + need;
    return ring_record{hdr[1], {data_ + pos + record_header_bytes, hdr[0]}};
  }
}

void shm_ring::pop() {
  tail_ = next_tail_;
  ctl_->tail.store(tail_, std::memory_order_release);
  ctl_->space_bell.ring();
}

bool shm_ring::wait_for_data(std::chrono::nanoseconds timeout, std::chrono::nanoseconds spin) {
  return ctl_->data_bell.wait([&] { return has_data(); }, spin,
                              std::chrono::steady_clock::now() + timeout);
}

} // namespace supernode::transport
