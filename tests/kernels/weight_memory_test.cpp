// Weight buffers: large ones start on a 2 MB boundary (the huge-page advice needs whole huge
// pages) unless SUPERNODE_HUGE_PAGES=0; small ones come from the ordinary heap; both hold their
// contents through copies and growth like any vector.

#include "kernels/weight_memory.hpp"

#include <cstdint>
#include <gtest/gtest.h>
#include <numeric>

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
