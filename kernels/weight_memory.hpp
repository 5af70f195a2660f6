#pragma once
// Memory for packed weights. Decode streams every weight once per step (about 1 GB in FP32 for
// `small`), so with 4 KB pages every 4 KB of it costs a TLB miss and a page walk, nested under a
// hypervisor. Buffers of 2 MB and more are therefore 2 MB-aligned and advised to transparent
// huge pages (MADV_HUGEPAGE: Debian's default THP mode is "madvise", so without the advice they
// never get them). Buffers from 64 KB up to 2 MB (a MoE expert's matrices) are carved from
// shared 16 MB slabs advised the same way, so they get huge pages without each being rounded up
// to one. SUPERNODE_HUGE_PAGES=0 turns both off (for A/B measurements); ASan builds keep the
// slabs off so each buffer's overruns are still caught.

#include <cstddef>
#include <vector>

namespace supernode::kernels {

namespace detail {
void* allocate_weight_bytes(std::size_t bytes);
void free_weight_bytes(void* p, std::size_t bytes);
// Slabs currently held for buffers of 64 KB to 2 MB (for tests).
std::size_t weight_slabs_in_use();
} // namespace detail

template<class T>
struct weight_allocator {
  using value_type = T;
  weight_allocator() = default;
  template<class U>
  weight_allocator(const weight_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(detail::allocate_weight_bytes(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { detail::free_weight_bytes(p, n * sizeof(T)); }
  template<class U>
  bool operator==(const weight_allocator<U>&) const noexcept {
    return true;
  }
};

template<class T>
using weight_vector = std::vector<T, weight_allocator<T>>;

// Whether large weight buffers are advised to huge pages in this process.
bool weight_huge_pages_enabled();

} // namespace supernode::kernels
