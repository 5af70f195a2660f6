#include "services/ems/dram_arena.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace supernode::services::ems {

namespace {

constexpr size_t huge_page = size_t{2} << 20;

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

} // namespace

dram_arena::dram_arena(size_t capacity, bool try_huge_pages)
    : capacity_(capacity / alignment * alignment) {
  if (capacity_ == 0) return;
  if (try_huge_pages) {
    const size_t len = round_up(capacity_, huge_page);
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      base_ = static_cast<std::byte*>(p);
      mapped_ = len;
      huge_pages_ = true;
    }
  }
  if (!base_) {
    const size_t len = round_up(capacity_, static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw std::runtime_error("dram_arena: mmap of " + std::to_string(len) +
                               " bytes failed: " + std::string(std::strerror(errno)));
    base_ = static_cast<std::byte*>(p);
    mapped_ = len;
  }
  free_.emplace(0, capacity_);
}

dram_arena::dram_arena(std::span<std::byte> memory)
    : base_(memory.data()), capacity_(memory.size() / alignment * alignment) {
  if (reinterpret_cast<uintptr_t>(base_) % alignment != 0)
    throw std::invalid_argument("dram_arena: external memory is not " + std::to_string(alignment) +
                                "-byte aligned");
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

dram_arena::~dram_arena() {
  if (base_ && mapped_ > 0) ::munmap(base_, mapped_);
}

std::optional<size_t> dram_arena::allocate(size_t bytes) {
  const size_t need = round_up(std::max<size_t>(bytes, 1), alignment);
  // First fit by address: cheap, and it packs blocks low, leaving the high end in one piece.
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t offset = it->first;
    const size_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + need, rest);
    allocated_.emplace(offset, need);
    used_ += need;
    return offset;
  }
  return std::nullopt;
}

void dram_arena::release(size_t offset) {
  auto it = allocated_.find(offset);
  if (it == allocated_.end())
    throw std::invalid_argument("dram_arena: release of offset " + std::to_string(offset) +
                                " which is not an allocated block");
  size_t start = offset;
  size_t size = it->second;
  allocated_.erase(it);
  used_ -= size;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
}

size_t dram_arena::largest_free_block() const {
  size_t best = 0;
  for (const auto& [offset, size] : free_) best = std::max(best, size);
  return best;
}

size_t dram_arena::allocated_size(size_t offset) const {
  auto it = allocated_.find(offset);
  return it == allocated_.end() ? 0 : it->second;
}

} // namespace supernode::services::ems
