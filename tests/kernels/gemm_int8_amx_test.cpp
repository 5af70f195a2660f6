// The AMX block driver on a scalar model of the tile instructions, so that its tiling, k tail
// and epilogue are checked on every machine, AMX or not (on AMX machines the isa/amx cases of
// gemm_int8_test run the real instructions). The model follows Intel's TDPBSSD pseudocode:
// C[m][n] += sum over the 16 rows i of B and j < 4 of s8 A[m][4i + j] * s8 B[i][4n + j].

#include "kernels/arch/x86/gemm_int8_amx_driver.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/gemm_int8_operands.hpp"
#include "tests/kernels/isa_test_util.hpp"

#include <cstring>
#include <gtest/gtest.h>
#include <tuple>

using namespace supernode::kernels;
using supernode::kernels::testing::random_floats;

namespace {

struct modelled_tiles {
  static constexpr int rows = 16, bytes = 64;
  alignas(64) static inline uint8_t tile[8][rows * bytes];
  static inline int dot_products = 0;

  template<int T>
  static void zero() {
    std::memset(tile[T], 0, sizeof tile[T]);
  }
  template<int T>
  static void load(const void* p, int64_t stride) {
    for (int r = 0; r < rows; ++r)
      std::memcpy(tile[T] + r * bytes, static_cast<const uint8_t*>(p) + r * stride, bytes);
  }
  template<int T>
  static void store(void* p, int64_t stride) {
    for (int r = 0; r < rows; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, tile[T] + r * bytes, bytes);
  }
  template<int C, int A, int B>
  static void dpbssd() {
    static_assert(C < 4 && A >= 4 && A < 6 && B >= 6, "accumulators 0-3, x 4-5, weights 6-7");
    ++dot_products;
    for (int m = 0; m < rows; ++m)
      for (int n = 0; n < bytes / 4; ++n) {
        int32_t acc;
        std::memcpy(&acc, tile[C] + m * bytes + n * 4, sizeof acc);
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < 4; ++j)
            acc += int32_t{static_cast<int8_t>(tile[A][m * bytes + i * 4 + j])} *
                   int32_t{static_cast<int8_t>(tile[B][i * bytes + n * 4 + j])};
        std::memcpy(tile[C] + m * bytes + n * 4, &acc, sizeof acc);
      }
  }
};

TEST(gemm_int8_amx_driver, matches_reference_on_modelled_tiles) {
  // Row tiles in pairs and alone, groups of 4 and 2 panels, partial channels, K in whole 64-k
  // steps, with a tail, and shorter than one step; a block that starts past row 0 and group 0.
  const std::tuple<int64_t, int64_t, int64_t> shapes[] = {
      {16, 64, 32}, {32, 128, 64}, {48, 100, 45}, {16, 4, 7}, {32, 260, 97}, {64, 1030, 40}};
  uint32_t seed = 7;
  for (auto [m, k, n] : shapes) {
    auto xf = random_floats(static_cast<size_t>(m * k), seed++);
    auto wf = random_floats(static_cast<size_t>(n * k), seed++, 0.05f);
    quantized_rows x;
    quantize_rows(xf.data(), m, k, k, x);
    const auto w = int8_weight::quantize(wf.data(), n, k);
    std::vector<float> got(m * n, -1.0f), want(m * n);
    gemm_int8_reference(x, w, want.data(), n);
    modelled_tiles::dot_products = 0;
    const auto o = int8_operands_of(x, w, got.data(), n);
    amx_driver::rows_block<modelled_tiles>(o, 0, 16, 0, w.groups());
    if (m > 16) amx_driver::rows_block<modelled_tiles>(o, 16, m, 1, w.groups());
    if (m > 16 && w.groups() > 1) amx_driver::rows_block<modelled_tiles>(o, 16, m, 0, 1);
    EXPECT_GT(modelled_tiles::dot_products, 0);
    for (int64_t i = 0; i < m * n; ++i)
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
          << "m=" << m << " k=" << k << " n=" << n << " at row " << i / n << " col " << i % n
          << ": " << got[i] << " vs " << want[i];
  }
}

TEST(gemm_int8_amx_driver, extremes_stay_exact_at_k_16384) {
  const int64_t m = 32, k = 16384, n = 32;
  quantized_rows x;
  x.rows = m;
  x.cols = k;
  x.stride = k;
  x.q.resize(m * k);
  x.scale.assign(m, 1.0f);
  for (int64_t i = 0; i < m * k; ++i) x.q[i] = (i / k) % 2 ? -127 : 127;
  std::vector<float> wf(n * k);
  for (int64_t i = 0; i < n * k; ++i) wf[i] = (i / k) % 3 == 0 ? -127.0f : 127.0f;
  const auto w = int8_weight::quantize(wf.data(), n, k);
  std::vector<float> got(m * n), want(m * n);
  gemm_int8_reference(x, w, want.data(), n);
  amx_driver::rows_block<modelled_tiles>(int8_operands_of(x, w, got.data(), n), 0, m, 0,
                                         w.groups());
  for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(got[i], want[i]) << i;
  EXPECT_EQ(got[0], -16384.0f * 127 * 127); // +127 row against a -127 channel
  EXPECT_EQ(got[n + 0], 16384.0f * 127 * 127);
}

} // namespace
