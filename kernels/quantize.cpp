#include "kernels/quantize.hpp"

#include "kernels/kernel_isa.hpp"
#include "kernels/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#if defined(__x86_64__)
#include "kernels/arch/x86/avx2_kernels.hpp"
#include "kernels/arch/x86/avx512_kernels.hpp"
#endif

namespace supernode::kernels {

namespace {
// The AVX2 and AVX-512 twins (arch/x86/quantize_avx2.cpp, quantize_avx512.cpp) compute the same
// values: max is exact, the division is IEEE, and both round half to even after clamping.
float quantize_row_portable(const float* x, int64_t cols, int8_t* q) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t i = 0; i < cols; ++i) {
    amax = std::max(amax, std::fabs(x[i]));
    nan |= std::isnan(x[i]);
  }
  const float scale = amax / 127.0f;
  if (nan || !std::isfinite(scale) || scale == 0.0f) {
    // A non-finite row keeps a NaN scale so the damage shows downstream instead of vanishing.
    std::memset(q, 0, static_cast<size_t>(cols));
    return scale == 0.0f && !nan ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  for (int64_t i = 0; i < cols; ++i) {
    const float r = std::clamp(x[i] / scale, -127.0f, 127.0f);
    q[i] = static_cast<int8_t>(std::nearbyint(r));
  }
  return scale;
}
} // namespace

float quantize_row(const float* x, int64_t cols, int8_t* q) {
#if defined(__x86_64__)
  const kernel_isa isa = active_kernel_isa();
  if (kernel_isa_has_avx512(isa)) return avx512::quantize_row(x, cols, q);
  if (kernel_isa_has_avx2(isa)) return avx2::quantize_row(x, cols, q);
#endif
  return quantize_row_portable(x, cols, q);
}

void quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t ldx, quantized_rows& out) {
  out.rows = rows;
  out.cols = cols;
  out.stride = (cols + quantize_k_step - 1) / quantize_k_step * quantize_k_step;
  out.q.resize(static_cast<size_t>(rows * out.stride));
  out.scale.resize(static_cast<size_t>(rows));
  // Rows are independent, so a prefill's hundreds of them go to the pool in ranges.
  parallel_for_ranges(rows, 32, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int8_t* q = out.q.data() + r * out.stride;
      out.scale[r] = quantize_row(x + r * ldx, cols, q);
      std::fill(q + cols, q + out.stride, int8_t{0});
    }
  });
}

void dequantize_rows(const quantized_rows& in, float* y, int64_t ldy) {
  for (int64_t r = 0; r < in.rows; ++r) {
    const int8_t* q = in.row(r);
    for (int64_t c = 0; c < in.cols; ++c) y[r * ldy + c] = static_cast<float>(q[c]) * in.scale[r];
  }
}

} // namespace supernode::kernels
