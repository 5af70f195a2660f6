#pragma once
// The operands the x86 INT8 units take, gathered from a quantized activation and a packed
// weight: one place for gemm_int8.cpp's dispatch and the tests that drive a unit directly.

#if defined(__x86_64__)
#include "kernels/arch/x86/avx2_kernels.hpp"
#include "kernels/gemm_int8.hpp"

namespace supernode::kernels {

inline avx2::int8_operands int8_operands_of(const quantized_rows& x, const int8_weight& w, float* y,
                                            int64_t ldy) {
  return {x.q.data(), x.stride,   x.scale.data(), w.packed(), w.scales(), w.u8_compensation(),
          w.n(),      w.panels(), w.k_padded(),   y,          ldy};
}

} // namespace supernode::kernels
#endif
