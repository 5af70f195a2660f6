#pragma once
// Runs a test body once per kernel path (portable, and each SIMD path where the CPU has it;
// skipped with the reason otherwise), restoring the process-wide choice afterwards; plus the random
// inputs the GEMM tests share.

#include "kernels/kernel_isa.hpp"

#include <cstdint>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

namespace supernode::kernels::testing {

class isa_test : public ::testing::TestWithParam<kernel_isa> {
protected:
  void SetUp() override {
    if (!kernel_isa_supported(GetParam()))
      GTEST_SKIP() << kernel_isa_name(GetParam()) << " not supported on this CPU";
    saved_ = active_kernel_isa();
    set_kernel_isa(GetParam());
    ASSERT_EQ(active_kernel_isa(), GetParam());
  }
  void TearDown() override { set_kernel_isa(saved_); }

private:
  kernel_isa saved_ = kernel_isa::portable;
};

inline std::string isa_param_name(const ::testing::TestParamInfo<kernel_isa>& info) {
  return kernel_isa_name(info.param);
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

} // namespace supernode::kernels::testing

#define SUPERNODE_INSTANTIATE_ISA_TESTS(suite)                                                     \
  INSTANTIATE_TEST_SUITE_P(isa, suite, ::testing::ValuesIn(::supernode::kernels::all_kernel_isas), \
                           ::supernode::kernels::testing::isa_param_name)
