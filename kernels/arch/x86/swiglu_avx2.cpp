// SwiGLU on YMM registers (AVX2): the same bits as the portable unit (swiglu_body.hpp).
#include "kernels/arch/x86/avx2_kernels.hpp"
#include "kernels/vector_exp.hpp"

namespace supernode::kernels::avx2 {
#define SUPERNODE_SWIGLU_WIDTH 8
#include "kernels/swiglu_body.hpp"
} // namespace supernode::kernels::avx2
