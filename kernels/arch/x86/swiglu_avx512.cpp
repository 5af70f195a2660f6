// SwiGLU on ZMM registers (AVX-512F): the same bits as the portable unit (swiglu_body.hpp).
#include "kernels/arch/x86/avx512_kernels.hpp"
#include "kernels/vector_exp.hpp"

namespace supernode::kernels::avx512 {
#define SUPERNODE_SWIGLU_WIDTH 16
#include "kernels/swiglu_body.hpp"
} // namespace supernode::kernels::avx512
