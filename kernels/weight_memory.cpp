#include "kernels/weight_memory.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sys/mman.h>

namespace supernode::kernels {

namespace {
constexpr std::size_t huge_page = std::size_t{2} << 20;

bool large(std::size_t bytes) {
  return bytes >= huge_page && weight_huge_pages_enabled();
}

std::size_t rounded(std::size_t bytes) {
  return (bytes + huge_page - 1) / huge_page * huge_page;
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
  if (!large(bytes)) return ::operator new(bytes);
  void* p = std::aligned_alloc(huge_page, rounded(bytes));
  if (!p) throw std::bad_alloc();
  // Advice only: where the kernel has no huge page to give, the buffer keeps 4 KB pages.
  madvise(p, rounded(bytes), MADV_HUGEPAGE);
  return p;
}

void free_weight_bytes(void* p, std::size_t bytes) {
  if (large(bytes))
    std::free(p);
  else
    ::operator delete(p);
}

} // namespace detail
} // namespace supernode::kernels
