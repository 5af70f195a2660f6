#include "services/moe/dispatch_buffers.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace supernode::services {

namespace {
size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}
std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}
} // namespace

void dispatch_sizes::validate() const {
  auto positive = [](int64_t v, const char* name) {
    if (v <= 0)
      throw std::invalid_argument(std::string("dispatch buffers: ") + name +
                                  " must be positive, got " + std::to_string(v));
  };
  positive(ranks, "ranks");
  positive(local_batch, "local_batch");
  positive(topk, "topk");
  positive(experts_per_rank, "experts_per_rank");
  positive(hidden, "hidden");
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::invalid_argument("dispatch buffers: alignment must be a power of two");
}

int64_t dispatch_sizes::max_tokens() const {
  return local_batch * std::min(topk, experts_per_rank);
}

size_t dispatch_sizes::dispatch_message_bytes() const {
  // The payload first, then the header rounded up on its own, as the paper pads its scale.
  return round_up(static_cast<size_t>(hidden), alignment) +
         round_up(sizeof(dispatch_header), alignment);
}

size_t dispatch_sizes::combine_message_bytes() const {
  return round_up(static_cast<size_t>(hidden) * combine_element_bytes, alignment);
}

size_t dispatch_sizes::dispatch_buffer_bytes() const {
  return static_cast<size_t>(ranks * max_tokens()) * dispatch_message_bytes();
}

size_t dispatch_sizes::combine_buffer_bytes() const {
  return static_cast<size_t>(ranks * max_tokens()) * combine_message_bytes();
}

std::string dispatch_sizes::describe() const {
  return "dispatch " + std::to_string(ranks) + " x " + std::to_string(max_tokens()) + " x " +
         std::to_string(dispatch_message_bytes()) + " B = " + mib(dispatch_buffer_bytes()) +
         ", combine " + std::to_string(ranks) + " x " + std::to_string(max_tokens()) + " x " +
         std::to_string(combine_message_bytes()) + " B = " + mib(combine_buffer_bytes()) +
         " per rank";
}

} // namespace supernode::services
