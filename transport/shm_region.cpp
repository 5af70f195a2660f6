#include "transport/shm_region.hpp"

#include <atomic>
#include <cstring>
#include <stdexcept>

namespace supernode::transport {

namespace {
constexpr uint64_t region_magic = 0x4E474552444F4E53ull; // "SNODREGN"
constexpr size_t page = 4096;
size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

struct region_control {
  uint64_t magic;
  uint64_t bytes;
  uint64_t flags;
};
} // namespace

// One cache line per flag: flags are written by different ranks, and packing them would make
// every publish invalidate its neighbours' lines.
struct alignas(64) shm_region::flag {
  std::atomic<uint64_t> value;
  doorbell bell;
};

namespace {
size_t flags_offset() {
  return 64;
}
size_t data_offset(size_t flags) {
  return round_up(flags_offset() + flags * 64, page); // 64 = sizeof(flag), page-aligned data
}
} // namespace

shm_region::shm_region(shm_segment seg) : segment_(std::move(seg)) {
  const auto* ctl = reinterpret_cast<const region_control*>(segment_.data());
  bytes_ = ctl->bytes;
  flags_ = ctl->flags;
  flag_words_ = reinterpret_cast<flag*>(segment_.data() + flags_offset());
  data_ = segment_.data() + data_offset(flags_);
}

shm_region shm_region::create(std::string_view cluster, std::string_view name, size_t bytes,
                              size_t flags) {
  static_assert(sizeof(flag) == 64);
  if (flags > (size_t{1} << 24))
    throw std::invalid_argument("shm region " + std::string(name) + ": too many flags");
  auto seg = shm_segment::create(cluster, "region." + std::string(name), segment_kind::region,
                                 data_offset(flags) + bytes);
  auto* ctl = new (seg.data()) region_control{region_magic, bytes, flags};
  (void)ctl;
  auto* f = reinterpret_cast<flag*>(seg.data() + flags_offset());
  for (size_t i = 0; i < flags; ++i) new (f + i) flag{};
  return shm_region(std::move(seg));
}

shm_region shm_region::open(std::string_view cluster, std::string_view name) {
  return from_segment(
      shm_segment::open(cluster, "region." + std::string(name), segment_kind::region));
}

std::optional<shm_region> shm_region::try_open(std::string_view cluster, std::string_view name) {
  auto seg = shm_segment::try_open(cluster, "region." + std::string(name), segment_kind::region);
  if (!seg || !seg->creator_alive()) return std::nullopt;
  return from_segment(std::move(*seg));
}

shm_region shm_region::from_segment(shm_segment seg) {
  const auto* ctl = reinterpret_cast<const region_control*>(seg.data());
  if (ctl->magic != region_magic || ctl->flags > (size_t{1} << 24) ||
      data_offset(ctl->flags) + ctl->bytes != seg.data_bytes())
    throw shm_error("shm region " + seg.name() + ": bad region header (" +
                    std::to_string(ctl->bytes) + " bytes, " + std::to_string(ctl->flags) +
                    " flags, segment holds " + std::to_string(seg.data_bytes()) + ")");
  return shm_region(std::move(seg));
}

std::span<std::byte> shm_region::span(size_t offset, size_t size) {
  if (offset > bytes_ || size > bytes_ - offset)
    throw std::out_of_range("shm region " + name() + ": [" + std::to_string(offset) + ", +" +
                            std::to_string(size) + ") is outside its " + std::to_string(bytes_) +
                            " bytes");
  return {data_ + offset, size};
}

void shm_region::write(size_t offset, std::span<const std::byte> bytes) {
  auto dst = span(offset, bytes.size());
  if (!bytes.empty()) std::memcpy(dst.data(), bytes.data(), bytes.size());
}

void shm_region::check_flag(size_t index) const {
  if (index >= flags_)
    throw std::out_of_range("shm region " + name() + ": flag " + std::to_string(index) +
                            " is outside its " + std::to_string(flags_) + " flags");
}

void shm_region::publish(size_t index, uint64_t value) {
  check_flag(index);
  flag_words_[index].value.store(value, std::memory_order_release);
  flag_words_[index].bell.ring();
}

uint64_t shm_region::add(size_t index, uint64_t delta) {
  check_flag(index);
  const uint64_t v = flag_words_[index].value.fetch_add(delta, std::memory_order_acq_rel) + delta;
  flag_words_[index].bell.ring();
  return v;
}

uint64_t shm_region::load(size_t index) const {
  check_flag(index);
  return flag_words_[index].value.load(std::memory_order_acquire);
}

bool shm_region::wait(size_t index, uint64_t at_least, std::chrono::nanoseconds timeout,
                      std::chrono::nanoseconds spin) {
  check_flag(index);
  auto& f = flag_words_[index];
  return f.bell.wait([&] { return f.value.load(std::memory_order_acquire) >= at_least; }, spin,
                     std::chrono::steady_clock::now() + timeout);
}

} // namespace supernode::transport
