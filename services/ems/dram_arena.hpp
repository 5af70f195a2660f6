#pragma once
// The MP server's DRAM tier: one mapped region and its allocator.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>

namespace supernode::services::ems {

// One mmap'd region carved by a first-fit free list; freed neighbours coalesce, so a region
// fragmented by small blocks becomes whole again once they are gone. Offsets and sizes are
// multiples of `alignment`, which keeps blocks cache-line aligned for the copy out over UB.
class dram_arena {
public:
  static constexpr size_t alignment = 64;

  // capacity is rounded down to `alignment`. With try_huge_pages the region is first mapped
  // with MAP_HUGETLB; when the machine has no huge pages it silently falls back to plain pages.
  // Throws std::runtime_error naming the size and errno when neither mapping succeeds.
  dram_arena(size_t capacity, bool try_huge_pages);
  // Carves memory someone else mapped (the MP server's shared region, which clients map to read
  // over UB); the arena never unmaps it. The start must be `alignment`-aligned.
  explicit dram_arena(std::span<std::byte> memory);
  ~dram_arena();
  dram_arena(const dram_arena&) = delete;
  dram_arena& operator=(const dram_arena&) = delete;

  // Offset of a new block of at least `bytes` (0 counts as 1), or nullopt when no free run is
  // large enough; the caller decides what to evict.
  std::optional<size_t> allocate(size_t bytes);
  // Throws std::invalid_argument naming the offset when it is not an allocated block.
  void release(size_t offset);

  std::byte* at(size_t offset) { return base_ + offset; }
  const std::byte* at(size_t offset) const { return base_ + offset; }
  size_t capacity() const { return capacity_; }
  size_t used_bytes() const { return used_; }
  size_t free_bytes() const { return capacity_ - used_; }
  size_t largest_free_block() const;
  size_t free_block_count() const { return free_.size(); }
  size_t allocated_size(size_t offset) const; // 0 when not allocated
  bool huge_pages() const { return huge_pages_; }

private:
  std::byte* base_ = nullptr;
  size_t mapped_ = 0;
  size_t capacity_ = 0;
  size_t used_ = 0;
  bool huge_pages_ = false;
  std::map<size_t, size_t> free_;      // offset -> size, ordered so neighbours are adjacent
  std::map<size_t, size_t> allocated_; // offset -> size
};

} // namespace supernode::services::ems
