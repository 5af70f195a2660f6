// AVX-VNNI INT8 GEMM blocks (compiled with -mavx2 -mfma -mavxvnni). The same tiles, weight
// layout and epilogue as the AVX2 unit; only the dot step differs: one vpdpbusd (VEX) in place
// of vpmaddubsw + vpmaddwd + vpaddd. vpdpbusd adds the four u8*s8 products into int32 with no
// intermediate saturation at all, and the sign trick keeps the operands the AVX2 path uses, so
// the int32 sums, and hence the results, are bit-identical to the AVX2 and portable paths.

#include "kernels/arch/x86/avxvnni_kernels.hpp"
#include "kernels/arch/x86/gemm_int8_tiles.hpp"

namespace supernode::kernels::avx_vnni {

namespace {
struct dpbusd_dot {
  static __m256i add(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
};
} // namespace

void gemm_int8_block(const avx2::int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  x86_int8::gemm_int8_block<dpbusd_dot>(o, m0, m1, g0, g1);
}

} // namespace supernode::kernels::avx_vnni
