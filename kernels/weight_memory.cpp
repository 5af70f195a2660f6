#include "kernels/weight_memory.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <sys/mman.h>
#include <vector>

namespace supernode::kernels {

namespace {
constexpr std::size_t huge_page = std::size_t{2} << 20;
// Buffers from here up to a huge page share huge-page slabs (an expert's 0.5-1 MB matrices:
// most of a MoE model's bytes). Smaller ones (scales, norms, biases) stay on the heap.
constexpr std::size_t slab_from = std::size_t{64} << 10;
constexpr std::size_t slab_bytes = std::size_t{16} << 20;
constexpr std::size_t slab_align = 64;

#if defined(__SANITIZE_ADDRESS__)
// Under ASan every buffer keeps its own heap block, so an overrun is reported, not absorbed by
// the neighbouring weight in a slab.
constexpr bool slabs_allowed = false;
#else
constexpr bool slabs_allowed = true;
#endif

bool large(std::size_t bytes) {
  return bytes >= huge_page && weight_huge_pages_enabled();
}

bool slabbed(std::size_t bytes) {
  return slabs_allowed && bytes >= slab_from && bytes < huge_page && weight_huge_pages_enabled();
}

std::size_t rounded(std::size_t bytes, std::size_t to) {
  return (bytes + to - 1) / to * to;
}

void* huge_page_buffer(std::size_t bytes) {
  void* p = std::aligned_alloc(huge_page, rounded(bytes, huge_page));
  if (!p) throw std::bad_alloc();
  // Advice only: where the kernel has no huge page to give, the buffer keeps 4 KB pages.
  madvise(p, rounded(bytes, huge_page), MADV_HUGEPAGE);
  return p;
}

// Slabs are carved front to back; a slab is returned when the last buffer in it is freed, or
// carved again from its start if it is the one being carved. Weights live as long as their
// model, so slabs pinned by one survivor are rare and bounded by slab_bytes each.
class slab_pool {
public:
  void* allocate(std::size_t bytes) {
    const std::size_t size = rounded(bytes, slab_align);
    std::lock_guard lock(mutex_);
    if (slabs_.empty() || slabs_.back().used + size > slab_bytes)
      slabs_.push_back({static_cast<char*>(huge_page_buffer(slab_bytes)), 0, 0});
    slab& s = slabs_.back();
    void* p = s.base + s.used;
    s.used += size;
    ++s.live;
    return p;
  }

  void free(void* p) {
    std::lock_guard lock(mutex_);
    const auto it = std::find_if(slabs_.begin(), slabs_.end(), [&](const slab& s) {
      return static_cast<char*>(p) >= s.base && static_cast<char*>(p) < s.base + slab_bytes;
    });
    if (it == slabs_.end() || --it->live > 0) return;
    if (it + 1 == slabs_.end()) {
      it->used = 0; // the slab being carved: start it over
      return;
    }
    std::free(it->base);
    slabs_.erase(it);
  }

  std::size_t slabs() {
    std::lock_guard lock(mutex_);
    return slabs_.size();
  }

private:
  struct slab {
    char* base;
    std::size_t used, live;
  };
  std::mutex mutex_;
  std::vector<slab> slabs_;
};

slab_pool& slab_pool_instance() {
  static slab_pool* pool = new slab_pool; // never destroyed: weights may outlive statics
  return *pool;
}
} // namespace

bool weight_huge_pages_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("SUPERNODE_HUGE_PAGES");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return enabled;
}

namespace detail {

void* allocate_weight_bytes(std::size_t bytes) {
  if (large(bytes)) return huge_page_buffer(bytes);
  if (slabbed(bytes)) return slab_pool_instance().allocate(bytes);
  return ::operator new(bytes);
}

void free_weight_bytes(void* p, std::size_t bytes) {
  if (large(bytes))
    std::free(p);
  else if (slabbed(bytes))
    slab_pool_instance().free(p);
  else
    ::operator delete(p);
}

std::size_t weight_slabs_in_use() {
  return slab_pool_instance().slabs();
}

} // namespace detail
} // namespace supernode::kernels
