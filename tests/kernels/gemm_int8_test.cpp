// INT8 GEMM: bit-identical to the scalar reference on every kernel path (portable, AVX2,
// AVX-VNNI, AVX-512 VNNI, AMX), at any shape, with saturation-prone extremes, and
// batch-invariant.

#include "kernels/gemm_int8.hpp"
#include "tests/kernels/isa_test_util.hpp"

#include <algorithm>
#include <cstring>
#include <gtest/gtest.h>
#include <tuple>

using namespace supernode::kernels;
using supernode::kernels::testing::random_floats;

namespace {

struct problem {
  quantized_rows x;
  int8_weight w;
};

problem make_problem(int64_t m, int64_t k, int64_t n, uint32_t seed) {
  problem p;
  auto xf = random_floats(static_cast<size_t>(m * k), seed);
  auto wf = random_floats(static_cast<size_t>(n * k), seed + 1000, 0.05f);
  quantize_rows(xf.data(), m, k, k, p.x);
  p.w = int8_weight::quantize(wf.data(), n, k);
  return p;
}

// Quantized rows holding exactly the given values, with scale 1.
quantized_rows rows_from_values(const std::vector<int8_t>& v, int64_t m, int64_t k) {
  quantized_rows x;
  x.rows = m;
  x.cols = k;
  x.stride = (k + quantize_k_step - 1) / quantize_k_step * quantize_k_step;
  x.q.assign(m * x.stride, 0);
  x.scale.assign(m, 1.0f);
  for (int64_t r = 0; r < m; ++r) std::copy_n(v.begin() + r * k, k, x.q.begin() + r * x.stride);
  return x;
}

void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << " differs at " << i << ": " << a[i] << " vs " << b[i];
}

class gemm_int8_test : public supernode::kernels::testing::isa_test {};

TEST_P(gemm_int8_test, matches_reference_bitwise_on_edge_shapes) {
  thread_pool pool(3);
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {
      {1, 1, 1},    {1, 3, 7},      {2, 67, 13},   {3, 64, 8},     {4, 5, 31},
      {5, 67, 33},  {1, 1024, 384}, {8, 1024, 97}, {13, 100, 130}, {37, 67, 45},
      {97, 33, 70}, {130, 40, 257}, {1, 16384, 9}, {6, 16384, 40}};
  uint32_t seed = 1;
  for (auto [m, k, n] : shapes) {
    auto p = make_problem(m, k, n, seed++);
    std::vector<float> got(m * n), want(m * n);
    gemm_int8(p.x, p.w, got.data(), n, pool);
    gemm_int8_reference(p.x, p.w, want.data(), n);
    expect_bitwise_equal(got, want,
                         "m=" + std::to_string(m) + " k=" + std::to_string(k) +
                             " n=" + std::to_string(n));
  }
}

TEST_P(gemm_int8_test, extreme_values_do_not_saturate) {
  // +-127 against +-127 in every sign combination, and -1 (0xff) bytes, at a K that makes the
  // int32 sums large: the u8*s8 pair sums stay exact only with the sign trick (AVX2, AVX-VNNI)
  // or the x + 128 bias and its compensation (AVX-512, where +127 becomes the u8 255). n = 37
  // gives a full panel group and a partial one; each row count reaches a different tile shape
  // (1 and 2 rows: one pass; 6: 4x2 tiles over k blocks with |w| made once on AVX2, 6-row
  // tiles on AVX-512; 11 and 12: one streaming tile of that height on AVX-512; 16: one AMX tile,
  // two 8-row tiles over k blocks on AVX-512; 24: two 12-row tiles on AVX-512).
  const int64_t k = 16384, m = 24, n = 37;
  const int8_t row_patterns[8][4] = {{127, 127, 127, 127},   {-127, -127, -127, -127},
                                     {127, -127, 127, -127}, {-1, -1, -1, -1},
                                     {-127, -1, 127, 1},     {0, -127, -1, 127},
                                     {127, 0, 0, 127},       {-127, 127, -127, 127}};
  const int8_t col_patterns[4][4] = {
      {127, 127, 127, 127}, {-127, -127, -127, -127}, {-127, 127, -1, -127}, {-1, -1, 127, -1}};
  std::vector<int8_t> xv(m * k);
  std::vector<float> wf(n * k);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) xv[r * k + c] = row_patterns[r % 8][c % 4];
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) wf[r * k + c] = col_patterns[r % 4][(c + r / 4) % 4];
  auto w = int8_weight::quantize(wf.data(), n, k);
  for (int64_t c = 0; c < n; ++c)
    ASSERT_EQ(w.scale(c), 1.0f); // every weight row holds a 127, so the values stay as given
  for (int64_t rows :
       {int64_t{1}, int64_t{2}, int64_t{6}, int64_t{11}, int64_t{12}, int64_t{16}, m}) {
    auto x = rows_from_values(xv, rows, k);
    std::vector<float> got(rows * n), want(rows * n);
    gemm_int8(x, w, got.data(), n);
    gemm_int8_reference(x, w, want.data(), n);
    expect_bitwise_equal(got, want, "extremes at m=" + std::to_string(rows));
    // And the reference itself is the exact integer sum, scaled.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < n; ++c) {
        int64_t exact = 0;
        for (int64_t i = 0; i < k; ++i) exact += int64_t{x.row(r)[i]} * w.at(c, i);
        EXPECT_EQ(want[r * n + c], static_cast<float>(exact) * 1.0f * w.scale(c));
      }
    EXPECT_EQ(got[0], 16384.0f * 127 * 127 * w.scale(0)); // all +127 against all +127
    if (rows > 1) {
      EXPECT_EQ(got[n + 1], 16384.0f * 127 * 127 * w.scale(1)); // -127 against -127
    }
  }
}

TEST_P(gemm_int8_test, rows_are_batch_invariant) {
  const int64_t k = 200, n = 75;
  auto p = make_problem(37, k, n, 77);
  std::vector<float> all(37 * n);
  gemm_int8(p.x, p.w, all.data(), n);
  // Every row computed alone (M=1) and inside smaller batches with different neighbours.
  for (int64_t m : {1, 2, 3, 5, 8}) {
    for (int64_t r0 = 0; r0 + m <= 37; r0 += 7) {
      quantized_rows sub;
      sub.rows = m;
      sub.cols = p.x.cols;
      sub.stride = p.x.stride;
      sub.q.assign(p.x.row(r0), p.x.row(r0) + m * p.x.stride);
      sub.scale.assign(p.x.scale.begin() + r0, p.x.scale.begin() + r0 + m);
      std::vector<float> part(m * n);
      gemm_int8(sub, p.w, part.data(), n);
      expect_bitwise_equal(part, {all.begin() + r0 * n, all.begin() + (r0 + m) * n},
                           "rows from " + std::to_string(r0) + " at m=" + std::to_string(m));
    }
  }
}

TEST_P(gemm_int8_test, thread_count_does_not_change_results) {
  auto p = make_problem(150, 96, 300, 5);
  std::vector<float> one(150 * 300), three(150 * 300);
  thread_pool p1(1), p3(3);
  gemm_int8(p.x, p.w, one.data(), 300, p1);
  gemm_int8(p.x, p.w, three.data(), 300, p3);
  expect_bitwise_equal(one, three, "1 vs 3 threads");
}

TEST_P(gemm_int8_test, zero_rows_and_zero_channels_give_zeros) {
  const int64_t m = 3, k = 19, n = 10;
  auto xf = random_floats(m * k, 8);
  auto wf = random_floats(n * k, 9);
  std::fill(xf.begin() + k, xf.begin() + 2 * k, 0.0f);     // row 1
  std::fill(wf.begin() + 4 * k, wf.begin() + 5 * k, 0.0f); // channel 4
  quantized_rows x;
  quantize_rows(xf.data(), m, k, k, x);
  auto w = int8_weight::quantize(wf.data(), n, k);
  EXPECT_EQ(x.scale[1], 0.0f);
  EXPECT_EQ(w.scale(4), 0.0f);
  std::vector<float> y(m * n, 1.0f), want(m * n);
  gemm_int8(x, w, y.data(), n);
  gemm_int8_reference(x, w, want.data(), n);
  expect_bitwise_equal(y, want, "zeros");
  for (int64_t c = 0; c < n; ++c) EXPECT_EQ(y[n + c], 0.0f);
  for (int64_t r = 0; r < m; ++r) EXPECT_EQ(y[r * n + 4], 0.0f);
}

TEST_P(gemm_int8_test, respects_output_stride) {
  const int64_t m = 5, k = 40, n = 13, ldy = 20;
  auto p = make_problem(m, k, n, 12);
  std::vector<float> y(m * ldy, -7.0f), want(m * ldy, -7.0f);
  gemm_int8(p.x, p.w, y.data(), ldy);
  gemm_int8_reference(p.x, p.w, want.data(), ldy);
  expect_bitwise_equal(y, want, "strided");
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = n; c < ldy; ++c) EXPECT_EQ(y[r * ldy + c], -7.0f);
}

TEST_P(gemm_int8_test, grouped_equals_one_gemm_per_problem) {
  // MoE-like: many experts with a few rows each, some with none, mixed shapes.
  std::vector<problem> ps;
  const int64_t rows[] = {1, 0, 3, 2, 7, 1, 0, 4, 1, 9};
  for (int i = 0; i < 10; ++i)
    ps.push_back(make_problem(rows[i], i % 2 ? 64 : 67, i % 3 ? 96 : 45, 100 + i));
  std::vector<std::vector<float>> got(ps.size()), want(ps.size());
  std::vector<gemm_int8_problem> list;
  for (size_t i = 0; i < ps.size(); ++i) {
    const int64_t n = ps[i].w.n();
    got[i].assign(ps[i].x.rows * n, 0.0f);
    want[i].assign(ps[i].x.rows * n, 0.0f);
    list.push_back({&ps[i].x, &ps[i].w, got[i].data(), n});
  }
  thread_pool pool(2);
  gemm_int8_grouped(list, pool);
  for (size_t i = 0; i < ps.size(); ++i) {
    gemm_int8(ps[i].x, ps[i].w, want[i].data(), ps[i].w.n(), pool);
    expect_bitwise_equal(got[i], want[i], "problem " + std::to_string(i));
  }
}

SUPERNODE_INSTANTIATE_ISA_TESTS(gemm_int8_test);

TEST(int8_weight, at_reads_back_the_quantized_rows) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {13, 67}, {40, 64}, {100, 5}}) {
    auto wf = random_floats(n * k, static_cast<uint32_t>(n * 31 + k));
    auto w = int8_weight::quantize(wf.data(), n, k);
    ASSERT_EQ(w.n(), n);
    ASSERT_EQ(w.k(), k);
    EXPECT_EQ(w.k_padded() % 4, 0);
    std::vector<int8_t> q(k);
    for (int64_t r = 0; r < n; ++r) {
      const float s = quantize_row(wf.data() + r * k, k, q.data());
      EXPECT_EQ(w.scale(r), s);
      for (int64_t c = 0; c < k; ++c) ASSERT_EQ(w.at(r, c), q[c]) << r << "," << c;
    }
    EXPECT_GE(w.bytes(), static_cast<size_t>(n * k));
  }
}

TEST(gemm_int8, every_path_gives_the_same_bits) {
  // Shapes that take every tile and k-block case of the SIMD drivers, including more rows than
  // one pass holds (rows_per_pass = 64) and several k blocks (64 runs of 4).
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {
      {1, 1000, 77}, {2, 300, 40}, {21, 300, 77}, {70, 520, 33}, {130, 1030, 70}};
  const auto saved = active_kernel_isa();
  uint32_t seed = 3;
  for (auto [m, k, n] : shapes) {
    auto p = make_problem(m, k, n, seed++);
    std::vector<float> want(m * n);
    set_kernel_isa(kernel_isa::portable);
    gemm_int8(p.x, p.w, want.data(), n);
    for (kernel_isa isa : all_kernel_isas) {
      if (isa == kernel_isa::portable || !kernel_isa_supported(isa)) continue;
      set_kernel_isa(isa);
      std::vector<float> got(m * n);
      gemm_int8(p.x, p.w, got.data(), n);
      expect_bitwise_equal(got, want,
                           std::string("portable vs ") + kernel_isa_name(isa) +
                               " m=" + std::to_string(m));
    }
  }
  set_kernel_isa(saved);
}

TEST(kernel_isa, names_round_trip_and_unsupported_paths_fall_back) {
  for (kernel_isa isa : all_kernel_isas) {
    kernel_isa parsed = kernel_isa::portable;
    ASSERT_TRUE(parse_kernel_isa(kernel_isa_name(isa), parsed));
    EXPECT_EQ(parsed, isa);
  }
  kernel_isa untouched = kernel_isa::avx2;
  EXPECT_FALSE(parse_kernel_isa("avx512", untouched));
  EXPECT_EQ(untouched, kernel_isa::avx2);
  // Every SIMD path needs AVX2, and AMX the AVX-512 VNNI path (its rows short of a tile run
  // there); a request the CPU cannot serve lands on the best supported path below it.
  for (kernel_isa isa : all_kernel_isas)
    if (isa != kernel_isa::portable && kernel_isa_supported(isa)) {
      EXPECT_TRUE(kernel_isa_supported(kernel_isa::avx2)) << kernel_isa_name(isa);
    }
  const auto saved = active_kernel_isa();
  for (kernel_isa isa : all_kernel_isas) {
    set_kernel_isa(isa);
    kernel_isa want = isa;
    while (!kernel_isa_supported(want)) want = static_cast<kernel_isa>(static_cast<int>(want) - 1);
    EXPECT_EQ(active_kernel_isa(), want) << "asked for " << kernel_isa_name(isa);
  }
  EXPECT_EQ(best_kernel_isa(), [] {
    kernel_isa best = kernel_isa::portable;
    for (kernel_isa isa : all_kernel_isas)
      if (kernel_isa_supported(isa)) best = isa;
    return best;
  }());
  set_kernel_isa(saved);
}

TEST(gemm_int8, rejects_mismatched_k) {
  auto p = make_problem(2, 10, 3, 1);
  auto w = int8_weight::quantize(random_floats(3 * 11, 2).data(), 3, 11);
  std::vector<float> y(6);
  EXPECT_THROW(gemm_int8(p.x, w, y.data(), 3), std::invalid_argument);
}

} // namespace
