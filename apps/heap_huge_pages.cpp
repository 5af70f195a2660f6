#include "apps/heap_huge_pages.hpp"

#include "kernels/weight_memory.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

namespace supernode::apps {

namespace {
constexpr const char* hugetlb_key = "glibc.malloc.hugetlb=";
constexpr const char* hugetlb_on = "glibc.malloc.hugetlb=1";

// Sanitizers bring their own allocator, which ignores glibc's tunables.
constexpr bool sanitized =
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#else
    false;
#endif

bool glibc_has_hugetlb_tunable() {
#if defined(__GLIBC__)
  int major = 0, minor = 0;
  std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor);
  return major > 2 || (major == 2 && minor >= 35);
#else
  return false;
#endif
}
} // namespace

std::optional<std::string> tunables_with_huge_page_heap(const char* current, bool enabled) {
  if (!enabled) return std::nullopt;
  if (!current || !*current) return std::string(hugetlb_on);
  const std::string tunables(current);
  if (tunables.find(hugetlb_key) != std::string::npos) return std::nullopt;
  return tunables + ":" + hugetlb_on;
}

bool heap_huge_pages_requested() {
  const char* t = std::getenv("GLIBC_TUNABLES");
  return !sanitized && glibc_has_hugetlb_tunable() && t && std::strstr(t, hugetlb_on) != nullptr;
}

void reexec_with_huge_page_heap(char** argv) {
  if (sanitized || !glibc_has_hugetlb_tunable()) return;
  const auto tunables = tunables_with_huge_page_heap(std::getenv("GLIBC_TUNABLES"),
                                                     kernels::weight_huge_pages_enabled());
  if (!tunables) return;
  if (setenv("GLIBC_TUNABLES", tunables->c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Not reached unless the exec failed: carry on with the heap as it is.
}

} // namespace supernode::apps
