#pragma once
// exp(x) for x <= 0 on GCC vectors of floats, the same bits on every instruction set:
// x = n ln2 + r (Cody-Waite), exp(r) by Cephes' expf polynomial, times 2^n built in the exponent
// field. 0 below -87 (where expf leaves the normal range), so a -inf argument weighs exactly
// nothing; exp(0) is exactly 1. Within 2 ulp of expf. The including unit must be built with
// -ffp-contract=off, so every a * b + c is a rounded multiply then a rounded add.
//
// Everything here is in an anonymous namespace on purpose: units built for different instruction
// sets include it, and each must keep its own copy (one shared inline copy could be the one the
// linker keeps, and run AVX-512 code on a CPU without it).

#include <cstdint>

namespace supernode::kernels::vector_math {
namespace {

template<class V>
inline V splat_float(float x) {
  V v;
  for (int i = 0; i < static_cast<int>(sizeof(V) / sizeof(float)); ++i) v[i] = x;
  return v;
}

// The int32 vector as wide as a float vector of `bytes` (GCC takes no dependent vector_size).
template<int bytes>
struct int32_vector;
template<>
struct int32_vector<16> {
  using type = int32_t __attribute__((vector_size(16)));
};
template<>
struct int32_vector<32> {
  using type = int32_t __attribute__((vector_size(32)));
};
template<>
struct int32_vector<64> {
  using type = int32_t __attribute__((vector_size(64)));
};

// exp_nonpositive of U registers in place, each step of the polynomial taken for all U before the
// next: every lane is still its own chain of the same operations (the same bits as U = 1), but U
// independent chains sit side by side in the instruction stream, so the out-of-order window holds
// work it can issue instead of one ~25-deep chain of dependent multiplies and adds. (SwiGLU on
// ZMM registers: 1.5x as fast with U = 8 as with U = 1 on Zen 5.)
template<int U, class V>
inline void exp_nonpositive_n(V (&x)[U]) {
  using vi = typename int32_vector<sizeof(V)>::type;
  const V magic = splat_float<V>(12582912.0f); // 1.5 * 2^23: adding then subtracting rounds
  V n[U], r[U], p[U];
  for (int k = 0; k < U; ++k) {
    const V xc = x[k] < -87.0f ? splat_float<V>(-87.0f) : x[k];
    n[k] = (xc * 1.44269504088896341f + magic) - magic;
    r[k] = xc - n[k] * 0.693359375f;
  }
  for (int k = 0; k < U; ++k) r[k] = r[k] - n[k] * -2.12194440e-4f;
  for (int k = 0; k < U; ++k) p[k] = splat_float<V>(1.9875691500e-4f) * r[k] + 1.3981999507e-3f;
  for (int k = 0; k < U; ++k) p[k] = p[k] * r[k] + 8.3334519073e-3f;
  for (int k = 0; k < U; ++k) p[k] = p[k] * r[k] + 4.1665795894e-2f;
  for (int k = 0; k < U; ++k) p[k] = p[k] * r[k] + 1.6666665459e-1f;
  for (int k = 0; k < U; ++k) p[k] = p[k] * r[k] + 5.0000001201e-1f;
  for (int k = 0; k < U; ++k) p[k] = p[k] * (r[k] * r[k]) + r[k] + 1.0f;
  for (int k = 0; k < U; ++k) {
    const vi e = (__builtin_convertvector(n[k], vi) + 127) << 23;
    const V y = p[k] * __builtin_bit_cast(V, e);
    x[k] = x[k] < -87.0f ? splat_float<V>(0.0f) : y;
  }
}

template<class V>
inline V exp_nonpositive(V x) {
  V one[1] = {x};
  exp_nonpositive_n(one);
  return one[0];
}

} // namespace
} // namespace supernode::kernels::vector_math
