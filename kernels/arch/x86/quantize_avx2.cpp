// AVX2 per-row quantization; must produce exactly what quantize_row_portable produces.
// Builtins rather than <cmath>/<algorithm>: see avx2_kernels.hpp.

#include "kernels/arch/x86/avx2_kernels.hpp"

#include <cstring>
#include <immintrin.h>

namespace supernode::kernels::avx2 {

namespace {
// Round half to even (MXCSR default), like std::nearbyint in the portable twin.
inline int8_t quantize_one(float v, float scale) {
  float r = v / scale;
  r = r < -127.0f ? -127.0f : r > 127.0f ? 127.0f : r;
  return static_cast<int8_t>(_mm_cvtss_si32(_mm_set_ss(r)));
}
} // namespace

float quantize_row(const float* x, int64_t cols, int8_t* q) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps(), vnan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= cols; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vmax = _mm256_max_ps(vmax, _mm256_and_ps(v, abs_mask));
    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float amax = 0.0f;
  for (float l : lanes) amax = l > amax ? l : amax;
  bool nan = _mm256_movemask_ps(vnan) != 0;
  for (; i < cols; ++i) {
    const float a = __builtin_fabsf(x[i]);
    amax = a > amax ? a : amax;
    nan |= __builtin_isnan(x[i]);
  }
  const float scale = amax / 127.0f;
  if (nan || !__builtin_isfinite(scale) || scale == 0.0f) {
    std::memset(q, 0, static_cast<size_t>(cols));
    return scale == 0.0f && !nan ? 0.0f : __builtin_nanf("");
  }
  const __m256 vs = _mm256_set1_ps(scale), lo = _mm256_set1_ps(-127.0f),
               hi = _mm256_set1_ps(127.0f);
  auto convert = [&](const float* p) {
    const __m256 r = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(_mm256_loadu_ps(p), vs), lo), hi);
    return _mm256_cvtps_epi32(r);
  };
  // The packs interleave 128-bit lanes; the permute restores element order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  i = 0;
  for (; i + 32 <= cols; i += 32) {
    const __m256i ab = _mm256_packs_epi32(convert(x + i), convert(x + i + 8));
    const __m256i cd = _mm256_packs_epi32(convert(x + i + 16), convert(x + i + 24));
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), bytes);
  }
  for (; i < cols; ++i) q[i] = quantize_one(x[i], scale);
  return scale;
}

} // namespace supernode::kernels::avx2
