// RMSNorm on every kernel path: the bits of its definition, each row's sum of squares one
// chain of double additions in element order, whatever the path, the rows normalized together
// (runs of eight and single rows), the width (a tail shorter than a register) or the row stride.

#include "isa_test_util.hpp"
#include "kernels/elementwise.hpp"
#if defined(__x86_64__)
#include "kernels/arch/x86/avx512_kernels.hpp"
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace supernode::kernels {
namespace {

using testing::random_floats;

class rms_norm_paths : public testing::isa_test {};

// The definition, one row at a time in plain scalar code.
std::vector<float> rms_norm_by_definition(const std::vector<float>& x, int64_t rows, int64_t dim,
                                          int64_t ldx, const std::vector<float>& w, float eps) {
  std::vector<float> y(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * ldx + i]) * x[r * ldx + i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * ldx + i] * inv * w[i];
  }
  return y;
}

TEST_P(rms_norm_paths, give_the_bits_of_the_definition_for_every_width_and_stride) {
  // 19 rows: two runs of eight, then three alone.
  const int64_t rows = 19;
  for (int64_t dim : {1, 7, 8, 37, 384, 1024, 1031}) {
    for (int64_t ldx : {dim, dim + 5}) {
      // Values far apart in size, so an addition in another order would round differently.
      auto x = random_floats(rows * ldx, static_cast<uint32_t>(dim + ldx), 3.0f);
      for (size_t i = 0; i < x.size(); i += 13) x[i] *= 4096.0f;
      const auto w = random_floats(dim, 2);
      std::vector<float> y(rows * dim, std::numeric_limits<float>::quiet_NaN());
      rms_norm(x.data(), rows, dim, ldx, w.data(), 1e-6f, y.data(), dim);
      const auto expected = rms_norm_by_definition(x, rows, dim, ldx, w, 1e-6f);
      EXPECT_EQ(0, std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)))
          << "dim " << dim << ", row stride " << ldx;
    }
  }
}

SUPERNODE_INSTANTIATE_ISA_TESTS(rms_norm_paths);

#if defined(__x86_64__)
// The float outputs above hide most of a double sum's last bits, so the AVX-512 sums are checked
// themselves: the same additions in the same order, on values spread over 2^±20, where adding
// in any other order rounds differently.
TEST(rms_norm_avx512, sums_of_squares_add_each_rows_elements_in_order) {
  if (!kernel_isa_supported(kernel_isa::avx512_vnni)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(7);
  for (int64_t dim : {1, 5, 8, 67, 1024}) {
    const int64_t ldx = dim + 3;
    auto x = random_floats(8 * ldx, static_cast<uint32_t>(dim));
    for (auto& v : x) v = std::ldexp(v, static_cast<int>(rng() % 41) - 20);
    double ss[8], expected[8] = {};
    avx512::sums_of_squares_8_rows(x.data(), ldx, dim, ss);
    for (int r = 0; r < 8; ++r)
      for (int64_t i = 0; i < dim; ++i)
        expected[r] += static_cast<double>(x[r * ldx + i]) * x[r * ldx + i];
    EXPECT_EQ(0, std::memcmp(ss, expected, sizeof ss)) << "dim " << dim;
  }
}
#endif

} // namespace
} // namespace supernode::kernels
