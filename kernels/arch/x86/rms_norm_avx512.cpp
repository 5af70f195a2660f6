// RMSNorm on AVX-512F, the bits of the scalar loops in elementwise.cpp. The sums of squares go
// eight rows at once, row r's sum in lane r of one ZMM register of doubles, its elements added
// one by one in order: a float's square is exact in double, so only the additions round, the
// same additions in the same order. The scaling is (x * inv) * weight per element, 16 at a time.
#include "kernels/arch/x86/avx512_kernels.hpp"

namespace supernode::kernels::avx512 {

namespace {
// Eight rows of eight floats in, eight columns of eight rows out (lane r of column j is row r's
// element j).
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// GCC 12 warns that _mm512_cvtps_pd's undefined pass-through "may be used uninitialized"; it is
// never read (no mask), as with avx512::to_float.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline __m512d add_square(__m512d sum, __m256 column) {
  const __m512d d = _mm512_cvtps_pd(column);
  return _mm512_add_pd(sum, _mm512_mul_pd(d, d));
}
#pragma GCC diagnostic pop
} // namespace

void sums_of_squares_8_rows(const float* x, int64_t ldx, int64_t dim, double* ss) {
  __m512d sum = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    __m256 rows[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) rows[r] = _mm256_loadu_ps(x + r * ldx + i);
    transpose8(rows);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) sum = add_square(sum, rows[j]);
  }
  for (; i < dim; ++i)
    sum = add_square(sum, _mm256_setr_ps(x[i], x[ldx + i], x[2 * ldx + i], x[3 * ldx + i],
                                         x[4 * ldx + i], x[5 * ldx + i], x[6 * ldx + i],
                                         x[7 * ldx + i]));
  _mm512_storeu_pd(ss, sum);
}

void scale_row(const float* x, float inv, const float* weight, float* y, int64_t dim) {
  const __m512 inv_v = _mm512_set1_ps(inv);
  for (int64_t i = 0; i < dim; i += 16) {
    const int64_t left = dim - i;
    const __mmask16 lanes = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(lanes, x + i);
    _mm512_mask_storeu_ps(
        y + i, lanes,
        _mm512_mul_ps(_mm512_mul_ps(xv, inv_v), _mm512_maskz_loadu_ps(lanes, weight + i)));
  }
}

} // namespace supernode::kernels::avx512
