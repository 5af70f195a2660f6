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

template<class V>
inline V exp_nonpositive(V x) {
  using vi = typename int32_vector<sizeof(V)>::type;
  const V magic = splat_float<V>(12582912.0f); // 1.5 * 2^23: adding then subtracting rounds
  const V xc = x < -87.0f ? splat_float<V>(-87.0f) : x;
  const V n = (xc * 1.44269504088896341f + magic) - magic;
  V r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V p = splat_float<V>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  const V y = p * __builtin_bit_cast(V, e);
  return x < -87.0f ? splat_float<V>(0.0f) : y;
}

} // namespace
} // namespace supernode::kernels::vector_math
