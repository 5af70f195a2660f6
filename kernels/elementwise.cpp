#include "kernels/elementwise.hpp"

#include "kernels/attention_decode.hpp"
#include "kernels/kernel_isa.hpp"
#include "kernels/vector_exp.hpp"

#include <cmath>
#if defined(__x86_64__)
#include "kernels/arch/x86/avx2_kernels.hpp"
#include "kernels/arch/x86/avx512_kernels.hpp"
#endif

namespace supernode::kernels {

// Returns `call` made on the unit of the active kernel path: ns::avx512, ns::avx2 or
// ns::portable (each compiled once per instruction set from one body).
#if defined(__x86_64__)
#define SUPERNODE_ON_ACTIVE_UNIT(ns, call)                                                         \
  do {                                                                                             \
    const kernel_isa isa = active_kernel_isa();                                                    \
    if (kernel_isa_has_avx512(isa)) return ns::avx512::call;                                       \
    if (kernel_isa_has_avx2(isa)) return ns::avx2::call;                                           \
    return ns::portable::call;                                                                     \
  } while (false)
#else
#define SUPERNODE_ON_ACTIVE_UNIT(ns, call) return ns::portable::call
#endif

namespace {
// ss[r] += x[r * ldx + i]² for i in order, R rows.
template<int R>
void sums_of_squares(const float* x, int64_t ldx, int64_t dim, double (&ss)[R]) {
#if defined(__x86_64__)
  if constexpr (R == 8)
    if (kernel_isa_has_avx512(active_kernel_isa()))
      return avx512::sums_of_squares_8_rows(x, ldx, dim, ss);
#endif
  for (int64_t i = 0; i < dim; ++i)
    for (int r = 0; r < R; ++r) ss[r] += static_cast<double>(x[r * ldx + i]) * x[r * ldx + i];
}

// y[i] = (x[i] * inv) * weight[i].
void scale_row(const float* x, float inv, const float* weight, float* y, int64_t dim) {
#if defined(__x86_64__)
  if (kernel_isa_has_avx512(active_kernel_isa())) return avx512::scale_row(x, inv, weight, y, dim);
#endif
  for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * inv * weight[i];
}

// R rows at once: each row's sum of squares is its own sequential chain in double (exact enough
// that dim order hardly matters, and fixed), so a row's bits do not depend on R. One chain
// waits on the add latency; R of them overlap. On AVX-512 eight rows' chains share one register,
// the same additions in the same order, and the scaling runs 16 floats at a time
// (rms_norm_avx512.cpp): 2.1x faster over 512 rows of 1,024 on one Zen 5 thread, the same bits.
template<int R>
void rms_norm_rows(const float* x, int64_t dim, int64_t ldx, const float* weight, float eps,
                   float* y, int64_t ldy) {
  double ss[R] = {};
  sums_of_squares(x, ldx, dim, ss);
  for (int r = 0; r < R; ++r)
    scale_row(x + r * ldx, static_cast<float>(1.0 / std::sqrt(ss[r] / dim + eps)), weight,
              y + r * ldy, dim);
}
} // namespace

void rms_norm(const float* x, int64_t rows, int64_t dim, int64_t ldx, const float* weight,
              float eps, float* y, int64_t ldy) {
  constexpr int together = 8;
  int64_t r = 0;
  for (; r + together <= rows; r += together)
    rms_norm_rows<together>(x + r * ldx, dim, ldx, weight, eps, y + r * ldy, ldy);
  for (; r < rows; ++r) rms_norm_rows<1>(x + r * ldx, dim, ldx, weight, eps, y + r * ldy, ldy);
}

namespace portable {
#define SUPERNODE_SWIGLU_WIDTH 4 // SSE2 on x86-64
#include "kernels/swiglu_body.hpp"
} // namespace portable

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  SUPERNODE_ON_ACTIVE_UNIT(kernels, silu_mul(gate, up, out, n));
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
  SUPERNODE_ON_ACTIVE_UNIT(attention_decode, axpy(alpha, x, y, n));
}

void add_weighted_rows(const float* w, int64_t rows, int64_t len, const float* coef, float* y) {
  SUPERNODE_ON_ACTIVE_UNIT(attention_decode, add_weighted_rows(w, rows, len, coef, y));
}

void weighted_sum_of_rows(const float* const* rows, int64_t count, int64_t len, const float* coef,
                          const float* then_add, float* y) {
  SUPERNODE_ON_ACTIVE_UNIT(attention_decode,
                           weighted_sum_of_rows(rows, count, len, coef, then_add, y));
}

} // namespace supernode::kernels
