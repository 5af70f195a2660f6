// Per-row INT8 quantization: error bound, range, padding, zero and non-finite rows, and every
// SIMD path producing exactly the portable result.

#include "kernels/quantize.hpp"
#include "tests/kernels/isa_test_util.hpp"

#include <cmath>
#include <gtest/gtest.h>
#include <vector>

using namespace supernode::kernels;
using supernode::kernels::testing::random_floats;

namespace {

class quantize_test : public supernode::kernels::testing::isa_test {};

TEST_P(quantize_test, round_trip_error_is_at_most_half_a_step) {
  for (int64_t cols : {1, 3, 8, 31, 32, 33, 67, 1000}) {
    const int64_t rows = 5;
    auto x = random_floats(rows * cols, static_cast<uint32_t>(cols), 3.0f);
    x[2 * cols] *= 50.0f; // one row dominated by an outlier
    quantized_rows q;
    quantize_rows(x.data(), rows, cols, cols, q);
    ASSERT_EQ(q.rows, rows);
    ASSERT_EQ(q.cols, cols);
    ASSERT_EQ(q.stride % quantize_k_step, 0);
    ASSERT_GE(q.stride, cols);
    ASSERT_LT(q.stride, cols + quantize_k_step);
    std::vector<float> back(rows * cols);
    dequantize_rows(q, back.data(), cols);
    for (int64_t r = 0; r < rows; ++r) {
      float amax = 0;
      for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      EXPECT_FLOAT_EQ(q.scale[r], amax / 127.0f);
      bool hit_127 = false;
      for (int64_t c = 0; c < cols; ++c) {
        const int8_t v = q.row(r)[c];
        EXPECT_GE(v, -127);
        hit_127 |= v == 127 || v == -127;
        EXPECT_LE(std::fabs(back[r * cols + c] - x[r * cols + c]), q.scale[r] * 0.5001f)
            << r << "," << c;
      }
      EXPECT_TRUE(hit_127) << "the largest magnitude maps to +-127";
      for (int64_t c = cols; c < q.stride; ++c) EXPECT_EQ(q.row(r)[c], 0) << "padding must be zero";
    }
  }
}

TEST_P(quantize_test, zero_row_has_zero_scale) {
  std::vector<float> x(2 * 40, 0.0f);
  x[40 + 3] = -2.0f;
  quantized_rows q;
  quantize_rows(x.data(), 2, 40, 40, q);
  EXPECT_EQ(q.scale[0], 0.0f);
  for (int64_t c = 0; c < 40; ++c) EXPECT_EQ(q.row(0)[c], 0);
  EXPECT_EQ(q.row(1)[3], -127);
}

TEST_P(quantize_test, non_finite_row_gets_nan_scale_and_spares_others) {
  auto x = random_floats(3 * 50, 9);
  x[50 + 7] = NAN;
  x[100 + 40] = INFINITY;
  quantized_rows q;
  quantize_rows(x.data(), 3, 50, 50, q);
  EXPECT_TRUE(std::isnan(q.scale[1]));
  EXPECT_TRUE(std::isnan(q.scale[2]));
  EXPECT_TRUE(std::isfinite(q.scale[0]));
  EXPECT_GT(q.scale[0], 0.0f);
}

TEST_P(quantize_test, reuses_storage_when_shapes_change) {
  quantized_rows q;
  auto a = random_floats(4 * 100, 1);
  quantize_rows(a.data(), 4, 100, 100, q);
  auto b = random_floats(2 * 9, 2);
  quantize_rows(b.data(), 2, 9, 9, q);
  EXPECT_EQ(q.rows, 2);
  EXPECT_EQ(q.stride, 12);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 9; c < 12; ++c) EXPECT_EQ(q.row(r)[c], 0);
}

TEST_P(quantize_test, matches_portable_exactly_including_ties) {
  // Every length to 130 (whole vectors and every tail of AVX2 and AVX-512).
  const kernel_isa here = GetParam();
  for (int64_t cols = 1; cols <= 130; ++cols) {
    auto x = random_floats(cols, static_cast<uint32_t>(cols) + 500);
    // Values on exact half steps of scale = 127/127 = 1: round-half-even must agree.
    if (cols > 4) {
      x[0] = 127.0f;
      for (int64_t c = 1; c < cols; ++c) x[c] = std::round(x[c] * 40.0f) + 0.5f;
    }
    std::vector<int8_t> qa(cols), qb(cols);
    set_kernel_isa(kernel_isa::portable);
    const float sa = quantize_row(x.data(), cols, qa.data());
    set_kernel_isa(here);
    const float sb = quantize_row(x.data(), cols, qb.data());
    EXPECT_EQ(sa, sb) << cols;
    EXPECT_EQ(qa, qb) << cols;
  }
}

SUPERNODE_INSTANTIATE_ISA_TESTS(quantize_test);

TEST(quantize, honours_row_stride_of_the_input) {
  auto x = random_floats(3 * 20, 4);
  quantized_rows strided, packed;
  quantize_rows(x.data(), 3, 13, 20, strided);
  std::vector<float> dense(3 * 13);
  for (int r = 0; r < 3; ++r) std::copy_n(x.begin() + r * 20, 13, dense.begin() + r * 13);
  quantize_rows(dense.data(), 3, 13, 13, packed);
  EXPECT_EQ(strided.q, packed.q);
  EXPECT_EQ(strided.scale, packed.scale);
}

} // namespace
