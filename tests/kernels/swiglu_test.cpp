// SwiGLU (silu_mul) on every kernel path: within a few ulp of g / (1 + exp(-g)) * up over the
// whole float range, and bit-identical to the portable path whatever the length (the tail of a
// row shorter than a register included).

#include "isa_test_util.hpp"
#include "kernels/elementwise.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace supernode::kernels {
namespace {

using testing::random_floats;

class swiglu : public testing::isa_test {};

std::vector<float> gates_over_the_range() {
  std::vector<float> g = random_floats(997, 11, 4.0f);
  for (float x : {0.0f,
                  -0.0f,
                  1e-30f,
                  -1e-30f,
                  1.0f,
                  -1.0f,
                  20.0f,
                  -20.0f,
                  86.0f,
                  -86.0f,
                  87.5f,
                  -87.5f,
                  88.7f,
                  -88.7f,
                  100.0f,
                  -100.0f,
                  1e30f,
                  -1e30f,
                  std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity()})
    g.push_back(x);
  return g;
}

std::vector<float> silu_mul_with(kernel_isa isa, const std::vector<float>& g,
                                 const std::vector<float>& up, size_t n) {
  const kernel_isa saved = active_kernel_isa();
  set_kernel_isa(isa);
  std::vector<float> out(n, -1.0f);
  silu_mul(g.data(), up.data(), out.data(), static_cast<int64_t>(n));
  set_kernel_isa(saved);
  return out;
}

TEST_P(swiglu, is_within_a_few_ulp_of_the_definition) {
  const auto g = gates_over_the_range();
  const auto up = random_floats(g.size(), 12);
  const auto out = silu_mul_with(GetParam(), g, up, g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * up[i];
    if (std::isinf(g[i])) {
      // silu(+inf) = +inf; silu(-inf) is -inf / inf, NaN in the definition's form and in ours.
      if (g[i] > 0) {
        EXPECT_EQ(out[i], g[i] * up[i]);
      } else {
        EXPECT_TRUE(std::isnan(out[i]));
      }
      continue;
    }
    const double tolerance = 4 * std::numeric_limits<float>::epsilon() * std::fabs(want) + 1e-35;
    EXPECT_NEAR(out[i], want, tolerance) << "g = " << g[i] << ", up = " << up[i];
  }
}

TEST_P(swiglu, gives_the_portable_bits_at_every_length) {
  const auto g = gates_over_the_range();
  const auto up = random_floats(g.size(), 13);
  for (size_t n : {size_t{1}, size_t{3}, size_t{7}, size_t{15}, size_t{16}, size_t{17}, size_t{33},
                   g.size()}) {
    const auto ours = silu_mul_with(GetParam(), g, up, n);
    const auto portable = silu_mul_with(kernel_isa::portable, g, up, n);
    for (size_t i = 0; i < n; ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(ours[i]), std::bit_cast<uint32_t>(portable[i]))
          << "n = " << n << ", i = " << i << ", g = " << g[i];
  }
}

SUPERNODE_INSTANTIATE_ISA_TESTS(swiglu);

} // namespace
} // namespace supernode::kernels
