#pragma once
// Entry points of the AVX-VNNI translation unit (compiled with -mavx2 -mfma -mavxvnni). Only
// call them after kernel_isa says the CPU has AVX-VNNI. Same rules as avx2_kernels.hpp: plain
// pointers and sizes only.

#include "kernels/arch/x86/avx2_kernels.hpp"

namespace supernode::kernels::avx_vnni {

// As avx2::gemm_int8_block, on the same packed weights, with the same results bit for bit.
void gemm_int8_block(const avx2::int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1);

} // namespace supernode::kernels::avx_vnni
