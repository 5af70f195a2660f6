// AVX2 INT8 GEMM blocks. Exact by construction: vpmaddubsw multiplies |a| (u8, <= 127) by
// a sign-adjusted s8 (|.| <= 127), so each int16 pair sum is at most 2*127*127 = 32258 and never
// saturates; vpmaddwd by ones widens to int32 before anything else is added. Integer sums do
// not depend on their order, so blocking over k changes nothing in the result.

#include "kernels/arch/x86/gemm_int8_tiles.hpp"

namespace supernode::kernels::avx2 {

namespace {
struct maddubs_dot {
  static __m256i add(__m256i acc, __m256i u, __m256i s) {
    const __m256i pairs = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};
} // namespace

void gemm_int8_block(const int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  x86_int8::gemm_int8_block<maddubs_dot>(o, m0, m1, g0, g1);
}

} // namespace supernode::kernels::avx2
