// Weight buffers: large ones start on a 2 MB boundary (the huge-page advice needs whole huge
// pages) unless SUPERNODE_HUGE_PAGES=0; mid-sized ones (64 KB to 2 MB) share huge-page slabs;
// small ones come from the ordinary heap; all hold their contents through copies and growth
// like any vector.

#include "kernels/weight_memory.hpp"

#include <algorithm>
#include <cstdint>
#include <gtest/gtest.h>
#include <numeric>
#include <vector>

using namespace supernode::kernels;

namespace {
constexpr uintptr_t huge_page = uintptr_t{2} << 20;
}

TEST(weight_memory, large_buffers_start_on_a_huge_page) {
  if (!weight_huge_pages_enabled()) GTEST_SKIP() << "SUPERNODE_HUGE_PAGES=0";
  for (size_t mb : {2, 3, 17}) {
    weight_vector<int8_t> v(mb << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % huge_page, 0u) << mb << " MB";
  }
}

TEST(weight_memory, contents_survive_copies_and_growth_across_the_threshold) {
  weight_vector<float> v(1000);
  std::iota(v.begin(), v.end(), 0.0f);
  v.resize((3u << 20) / sizeof(float)); // grows from the heap into a huge-page buffer
  weight_vector<float> copy = v;
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(copy[i], float(i));
  EXPECT_EQ(copy[999 + 1], 0.0f);
  copy.resize(10); // stays in its buffer; freeing it must match how it was allocated
  copy.shrink_to_fit();
  EXPECT_EQ(copy[9], 9.0f);
}

namespace {
bool slabs_expected() {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#else
  return weight_huge_pages_enabled();
#endif
}
} // namespace

TEST(weight_memory, expert_sized_buffers_share_huge_page_slabs_and_give_them_back) {
  if (!slabs_expected()) GTEST_SKIP() << "slabs are off (SUPERNODE_HUGE_PAGES=0 or ASan)";
  const size_t before = detail::weight_slabs_in_use();
  {
    // 40 experts' matrices of 1 MB and 0.5 MB: 60 MB, so four 16 MB slabs.
    std::vector<weight_vector<int8_t>> experts;
    for (int e = 0; e < 40; ++e) {
      experts.emplace_back(size_t{1} << 20, static_cast<int8_t>(e));
      experts.emplace_back(size_t{1} << 19, static_cast<int8_t>(-e));
    }
    EXPECT_GE(detail::weight_slabs_in_use(), before + 3);
    for (size_t i = 0; i < experts.size(); ++i) {
      const auto& v = experts[i];
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u) << i;
      const int8_t want = static_cast<int8_t>(i % 2 == 0 ? int(i / 2) : -int(i / 2));
      ASSERT_EQ(v.front(), want) << i; // neighbours in a slab never overlap
      ASSERT_EQ(v.back(), want) << i;
    }
    // Carved front to back: in a fresh slab the second buffer starts where the first ends.
    if (before == 0) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(experts[0].data()) % huge_page, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(experts[1].data()) -
                    reinterpret_cast<uintptr_t>(experts[0].data()),
                size_t{1} << 20);
    }
  }
  // Every slab but the one being carved is returned; that one is carved again from its start.
  EXPECT_LE(detail::weight_slabs_in_use(), std::max<size_t>(before, 1));
}

TEST(weight_memory, small_and_mid_buffers_outlive_each_other_in_any_order) {
  std::vector<weight_vector<float>> v;
  for (int i = 0; i < 64; ++i) v.emplace_back(size_t{1} << (10 + i % 10), float(i)); // 4 KB-2 MB
  for (size_t i = 0; i < v.size(); i += 2) v[i] = {}; // free every other one
  for (size_t i = 1; i < v.size(); i += 2) {
    ASSERT_EQ(v[i].front(), float(i));
    ASSERT_EQ(v[i].back(), float(i));
  }
  v.clear();
  weight_vector<float> again(size_t{1} << 17, 7.0f); // the pool still serves after all that
  EXPECT_EQ(again[12345], 7.0f);
}
