#include "services/moe/ep_layout.hpp"

#include <cstdio>

namespace supernode::services {

namespace {
size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}
} // namespace

size_t ep_layout::combine_message_bytes() const {
  return sizeof(ep_combine_header) + round_up(static_cast<size_t>(hidden) * sizeof(float), 64);
}

size_t ep_layout::dispatch_offset(int slot, int source, int64_t index) const {
  const auto per_slot = sizes.dispatch_buffer_bytes();
  return static_cast<size_t>(slot) * per_slot +
         static_cast<size_t>(source * sizes.max_tokens() + index) * dispatch_message_bytes();
}

size_t ep_layout::count_offset(int slot, int source) const {
  return 2 * sizes.dispatch_buffer_bytes() +
         static_cast<size_t>(slot * sizes.ranks + source) * sizeof(ep_count_entry);
}

size_t ep_layout::combine_offset(int slot, int64_t batch_slot, int64_t route_slot) const {
  const size_t base =
      count_offset(0, 0) + 2 * static_cast<size_t>(sizes.ranks) * sizeof(ep_count_entry);
  return base +
         static_cast<size_t>((slot * sizes.local_batch + batch_slot) * sizes.topk + route_slot) *
             combine_message_bytes();
}

size_t ep_layout::stats_bytes_per_rank() const {
  return round_up(static_cast<size_t>(moe_layers * experts) * sizeof(uint32_t), 64);
}

size_t ep_layout::stats_offset(int source) const {
  return combine_offset(2, 0, 0) + static_cast<size_t>(source) * stats_bytes_per_rank();
}

size_t ep_layout::placement_offset() const {
  return stats_offset(static_cast<int>(sizes.ranks));
}

size_t ep_layout::note_offset(int source) const {
  return round_up(placement_offset() + placement_words * sizeof(int32_t), 64) +
         static_cast<size_t>(source) * note_bytes;
}

size_t ep_layout::total_bytes() const {
  return round_up(note_offset(static_cast<int>(sizes.ranks)), 4096);
}

std::string ep_layout::describe() const {
  char buf[256];
  const double mib = 1 << 20;
  std::snprintf(buf, sizeof buf,
                "dispatch %lld ranks x %lld tokens x %zu B = %.2f MiB, combine %lld x %lld x %zu B "
                "= %.2f MiB (x2 slots each); region %.2f MiB per rank",
                static_cast<long long>(sizes.ranks), static_cast<long long>(sizes.max_tokens()),
                dispatch_message_bytes(), static_cast<double>(sizes.dispatch_buffer_bytes()) / mib,
                static_cast<long long>(sizes.local_batch), static_cast<long long>(sizes.topk),
                combine_message_bytes(),
                static_cast<double>(sizes.local_batch * sizes.topk) *
                    static_cast<double>(combine_message_bytes()) / mib,
                static_cast<double>(total_bytes()) / mib);
  return buf;
}

} // namespace supernode::services
