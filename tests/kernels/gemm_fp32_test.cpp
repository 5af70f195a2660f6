// FP32 GEMM: close to a double-precision reference, and bit-for-bit batch-invariant on every
// kernel path (each output is one fixed-order sum over k, whatever M); the AVX-512 code gives
// the AVX2 code's bits (the same FMA chain per output).

#include "kernels/gemm_fp32.hpp"
#include "tests/kernels/isa_test_util.hpp"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <tuple>

using namespace supernode::kernels;
using supernode::kernels::testing::random_floats;

namespace {

void expect_bitwise_equal(const float* a, const float* b, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << " differs at " << i << ": " << a[i] << " vs " << b[i];
}

// |got - want| within a relative bound of the sum of |x*w| terms: float rounding of any order.
void expect_close_to_reference(const std::vector<float>& x, int64_t m, int64_t ldx,
                               const std::vector<float>& wf, const fp32_weight& w,
                               const std::vector<float>& got, int64_t ldy,
                               const std::string& what) {
  const int64_t n = w.n(), k = w.k();
  std::vector<float> want(m * ldy);
  gemm_fp32_reference(x.data(), m, ldx, w, want.data(), ldy);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double mag = 0;
      for (int64_t i = 0; i < k; ++i) mag += std::fabs(double(x[r * ldx + i]) * wf[c * k + i]);
      ASSERT_NEAR(got[r * ldy + c], want[r * ldy + c], 2e-6 * mag + 1e-30)
          << what << " at " << r << "," << c;
    }
}

class gemm_fp32_test : public supernode::kernels::testing::isa_test {};

TEST_P(gemm_fp32_test, matches_reference_on_edge_shapes) {
  thread_pool pool(3);
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {
      {1, 1, 1},    {1, 3, 7},      {2, 67, 13},   {3, 64, 16},    {4, 5, 31},
      {5, 67, 65},  {1, 1024, 384}, {8, 256, 97},  {13, 100, 130}, {37, 67, 45},
      {97, 33, 70}, {130, 40, 257}, {1, 16384, 9}, {7, 16384, 40}};
  uint32_t seed = 1;
  for (auto [m, k, n] : shapes) {
    auto x = random_floats(m * k, seed++);
    auto wf = random_floats(n * k, seed++, 0.05f);
    auto w = fp32_weight::pack(wf.data(), n, k);
    std::vector<float> y(m * n);
    gemm_fp32(x.data(), m, k, w, y.data(), n, pool);
    expect_close_to_reference(x, m, k, wf, w, y, n,
                              "m=" + std::to_string(m) + " k=" + std::to_string(k) +
                                  " n=" + std::to_string(n));
  }
}

TEST_P(gemm_fp32_test, rows_are_batch_invariant) {
  const int64_t k = 300, n = 150, m_all = 37;
  auto x = random_floats(m_all * k, 11);
  auto wf = random_floats(n * k, 12);
  auto w = fp32_weight::pack(wf.data(), n, k);
  std::vector<float> all(m_all * n);
  gemm_fp32(x.data(), m_all, k, w, all.data(), n);
  for (int64_t m : {1, 2, 3, 4, 6, 7, 13}) {
    for (int64_t r0 = 0; r0 + m <= m_all; r0 += 5) {
      std::vector<float> part(m * n);
      gemm_fp32(x.data() + r0 * k, m, k, w, part.data(), n);
      expect_bitwise_equal(part.data(), all.data() + r0 * n, part.size(),
                           "rows from " + std::to_string(r0) + " at m=" + std::to_string(m));
    }
  }
}

TEST_P(gemm_fp32_test, thread_count_does_not_change_results) {
  const int64_t m = 150, k = 70, n = 333;
  auto x = random_floats(m * k, 21);
  auto wf = random_floats(n * k, 22);
  auto w = fp32_weight::pack(wf.data(), n, k);
  std::vector<float> one(m * n), three(m * n);
  thread_pool p1(1), p3(3);
  gemm_fp32(x.data(), m, k, w, one.data(), n, p1);
  gemm_fp32(x.data(), m, k, w, three.data(), n, p3);
  expect_bitwise_equal(one.data(), three.data(), one.size(), "1 vs 3 threads");
}

TEST_P(gemm_fp32_test, respects_strides) {
  const int64_t m = 6, k = 21, n = 17, ldx = 30, ldy = 25;
  auto x = random_floats(m * ldx, 31);
  auto wf = random_floats(n * k, 32);
  auto w = fp32_weight::pack(wf.data(), n, k);
  std::vector<float> y(m * ldy, -3.0f);
  gemm_fp32(x.data(), m, ldx, w, y.data(), ldy);
  expect_close_to_reference(x, m, ldx, wf, w, y, ldy, "strided");
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = n; c < ldy; ++c) EXPECT_EQ(y[r * ldy + c], -3.0f);
}

TEST_P(gemm_fp32_test, zero_rows_give_zeros) {
  const int64_t m = 3, k = 50, n = 20;
  auto x = random_floats(m * k, 41);
  std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);
  auto wf = random_floats(n * k, 42);
  auto w = fp32_weight::pack(wf.data(), n, k);
  std::vector<float> y(m * n, 1.0f);
  gemm_fp32(x.data(), m, k, w, y.data(), n);
  for (int64_t c = 0; c < n; ++c) EXPECT_EQ(y[n + c], 0.0f);
}

TEST_P(gemm_fp32_test, grouped_equals_one_gemm_per_problem) {
  const int64_t rows[] = {1, 0, 3, 2, 7, 1, 0, 4, 1, 9};
  std::vector<std::vector<float>> xs, ws, got, want;
  std::vector<fp32_weight> packed;
  for (int i = 0; i < 10; ++i) {
    const int64_t k = i % 2 ? 64 : 67, n = i % 3 ? 96 : 45;
    xs.push_back(random_floats(rows[i] * k, 200 + i));
    ws.push_back(random_floats(n * k, 300 + i));
    packed.push_back(fp32_weight::pack(ws.back().data(), n, k));
    got.emplace_back(rows[i] * n, 0.0f);
    want.emplace_back(rows[i] * n, 0.0f);
  }
  std::vector<gemm_fp32_problem> list;
  for (int i = 0; i < 10; ++i)
    list.push_back(
        {xs[i].data(), rows[i], packed[i].k(), &packed[i], got[i].data(), packed[i].n()});
  thread_pool pool(2);
  gemm_fp32_grouped(list, pool);
  for (int i = 0; i < 10; ++i) {
    gemm_fp32(xs[i].data(), rows[i], packed[i].k(), packed[i], want[i].data(), packed[i].n(), pool);
    expect_bitwise_equal(got[i].data(), want[i].data(), got[i].size(),
                         "problem " + std::to_string(i));
  }
}

SUPERNODE_INSTANTIATE_ISA_TESTS(gemm_fp32_test);

TEST(fp32_weight, at_reads_back_the_weights) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {13, 67}, {70, 16}, {129, 5}}) {
    auto wf = random_floats(n * k, static_cast<uint32_t>(n * 7 + k));
    auto w = fp32_weight::pack(wf.data(), n, k);
    ASSERT_EQ(w.n(), n);
    ASSERT_EQ(w.k(), k);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) ASSERT_EQ(w.at(r, c), wf[r * k + c]) << r << "," << c;
  }
}

TEST(gemm_fp32, avx512_gives_the_avx2_bits) {
  if (!kernel_isa_supported(kernel_isa::avx512_vnni))
    GTEST_SKIP() << "avx512_vnni (the FP32 GEMM's AVX-512 code) not supported on this CPU";
  // Every tile height (1-6 rows, and more rows than one tile), every panel count of a group
  // (1-4, partial channels), short and long K.
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {
      {1, 1000, 77}, {2, 300, 40}, {5, 64, 16}, {6, 333, 49}, {21, 300, 130}, {70, 520, 33}};
  const auto saved = active_kernel_isa();
  uint32_t seed = 11;
  for (auto [m, k, n] : shapes) {
    auto x = random_floats(m * k, seed++);
    auto wf = random_floats(n * k, seed++, 0.05f);
    auto w = fp32_weight::pack(wf.data(), n, k);
    std::vector<float> want(m * n), got(m * n);
    set_kernel_isa(kernel_isa::avx2);
    gemm_fp32(x.data(), m, k, w, want.data(), n);
    set_kernel_isa(kernel_isa::avx512_vnni);
    gemm_fp32(x.data(), m, k, w, got.data(), n);
    expect_bitwise_equal(got.data(), want.data(), got.size(),
                         "avx2 vs avx512 at m=" + std::to_string(m) + " n=" + std::to_string(n));
  }
  set_kernel_isa(saved);
}

} // namespace
