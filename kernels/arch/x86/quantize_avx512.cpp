// AVX-512 per-row quantization: exactly what quantize_row_portable produces (the max is exact,
// the division IEEE, and the conversion rounds half to even after clamping), 16 floats a step
// and the tail under a mask. The AVX2 twin's division was the limit of a row: a ZMM divide
// carries twice the floats for about the same issue cost on Zen 4/5 and Ice Lake and later.

#include "kernels/arch/x86/avx512_kernels.hpp"

#include <cstring>
#include <immintrin.h>

namespace supernode::kernels::avx512 {

// GCC 12 warns that the _mm512_undefined_ps pass-through of max, min and cvtps "may be used
// uninitialized"; it is never read (no mask), as in avx512_kernels.hpp's to_float.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
float quantize_row(const float* x, int64_t cols, int8_t* q) {
  // The lanes of the 16 floats from i on that are inside the row.
  const auto inside = [cols](int64_t i) {
    return cols - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cols - i)) - 1);
  };
  __m512 vmax = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < cols; i += 16) {
    const __mmask16 m = inside(i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(v));
    nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
  }
  const float scale = _mm512_reduce_max_ps(vmax) / 127.0f;
  if (nan != 0 || !__builtin_isfinite(scale) || scale == 0.0f) {
    std::memset(q, 0, static_cast<size_t>(cols));
    return scale == 0.0f && nan == 0 ? 0.0f : __builtin_nanf("");
  }
  const __m512 vs = _mm512_set1_ps(scale), lo = _mm512_set1_ps(-127.0f),
               hi = _mm512_set1_ps(127.0f);
  // In [-127, 127] after the clamp, so narrowing keeps every value.
  const auto quantized = [&](__m512 v) {
    return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_div_ps(v, vs), lo), hi));
  };
  int64_t i = 0;
  // Whole steps narrow in a register and store 16 bytes: the narrowing store to memory
  // (vpmovdb m128) took 1.15-1.2x as long per 512-float row on Zen 5.
  for (; i + 16 <= cols; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     _mm512_cvtepi32_epi8(quantized(_mm512_loadu_ps(x + i))));
  if (i < cols) {
    const __mmask16 m = inside(i);
    _mm512_mask_cvtepi32_storeu_epi8(q + i, m, quantized(_mm512_maskz_loadu_ps(m, x + i)));
  }
  return scale;
}
#pragma GCC diagnostic pop

} // namespace supernode::kernels::avx512
