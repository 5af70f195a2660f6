#pragma once
// Transparent huge pages for glibc's malloc heap. A fresh engine's first prompt touches a few
// hundred megabytes of scratch (activations, expert batches, the KV cache) for the first time,
// and under a hypervisor each 4 KB page fault costs microseconds: a new prefill instance took
// 2.5x as long over its first 2,048-token prompt as over the next. glibc (2.35 and later)
// advises its heap and its mmap'd blocks to THP when the tunable glibc.malloc.hugetlb=1 is
// set, but reads tunables only when a process starts, so main() re-executes the binary once
// with it added to GLIBC_TUNABLES. SUPERNODE_HUGE_PAGES=0 turns this off with the weights'
// huge pages (kernels/weight_memory.hpp); a hugetlb setting of the user's own is kept.

#include <optional>
#include <string>

namespace supernode::apps {

// GLIBC_TUNABLES with the huge-page heap added to `current` (null when unset), or nothing when
// it needs no change: turned off, or a malloc.hugetlb value already chosen.
std::optional<std::string> tunables_with_huge_page_heap(const char* current, bool enabled);

// True when this process's GLIBC_TUNABLES asks glibc for a huge-page heap.
bool heap_huge_pages_requested();

// At the very start of main: execs /proc/self/exe with the same arguments and the tunable set,
// where glibc knows it and it is not set yet. Returns only when there is nothing to do or the
// exec failed (the process then runs with 4 KB heap pages, as before).
void reexec_with_huge_page_heap(char** argv);

} // namespace supernode::apps
