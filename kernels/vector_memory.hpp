#pragma once
// Unaligned loads and stores of GCC vector-extension registers of floats, for the kernel bodies
// compiled once per instruction set (attention_tiles_body.hpp, attention_decode_body.hpp):
// memcpy, which the compiler turns into one vector move of the unit's width.

namespace supernode::kernels::vector_memory {

template<class V>
inline V load(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

template<class V>
inline void store(float* p, V v) {
  __builtin_memcpy(p, &v, sizeof v);
}

} // namespace supernode::kernels::vector_memory
