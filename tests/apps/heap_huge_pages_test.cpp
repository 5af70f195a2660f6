// The GLIBC_TUNABLES value that main() re-executes with (apps/heap_huge_pages.cpp).

#include "apps/heap_huge_pages.hpp"

#include <gtest/gtest.h>

using supernode::apps::tunables_with_huge_page_heap;

TEST(heap_huge_pages, asks_for_the_huge_page_heap_where_nothing_is_set) {
  EXPECT_EQ(tunables_with_huge_page_heap(nullptr, true), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(tunables_with_huge_page_heap("", true), "glibc.malloc.hugetlb=1");
}

TEST(heap_huge_pages, keeps_the_users_other_tunables) {
  EXPECT_EQ(tunables_with_huge_page_heap("glibc.malloc.arena_max=2", true),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
}

TEST(heap_huge_pages, changes_nothing_once_set_or_when_turned_off) {
  // Set already (the re-executed process itself, or the user's own choice, even 0).
  EXPECT_FALSE(tunables_with_huge_page_heap("glibc.malloc.hugetlb=1", true));
  EXPECT_FALSE(
      tunables_with_huge_page_heap("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0", true));
  // SUPERNODE_HUGE_PAGES=0.
  EXPECT_FALSE(tunables_with_huge_page_heap(nullptr, false));
  EXPECT_FALSE(tunables_with_huge_page_heap("glibc.malloc.arena_max=2", false));
}
