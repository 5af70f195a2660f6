#pragma once
// The latent-space step of absorbed MLA decode (kernels::mla_decode) and the weighted row sums
// of the absorption and the MoE combine (kernels::add_weighted_rows, weighted_sum_of_rows, axpy),
// compiled once per instruction set from one source (attention_decode_body.hpp): portable C++, AVX2
// and AVX-512. The kernels:: functions pick the unit by kernel_isa; every unit gives the same bits.
//
// A score q·c is a 16-lane dot product: lane j sums the products of the elements i ≡ j (mod 16)
// in order of i (a short last chunk padded with zeros), and the 16 lanes are then added by one
// fixed halving tree. Outputs are chains of rounded multiplies and adds, one per element (the
// units are built with -ffp-contract=off). So the result depends neither on the register width
// nor on which heads share a pass over the cache.

#include "kernels/attention.hpp"
#include "kernels/vector_memory.hpp" // the units' loads and stores

#include <cstdint>

namespace supernode::kernels::attention_decode {

namespace portable {
void mla_decode(const mla_decode_args& a);
void axpy(float alpha, const float* x, float* y, int64_t n);
void add_weighted_rows(const float* w, int64_t rows, int64_t len, const float* coef, float* y);
void weighted_sum_of_rows(const float* const* rows, int64_t count, int64_t len, const float* coef,
                          const float* then_add, float* y);
} // namespace portable
namespace avx2 {
void mla_decode(const mla_decode_args& a);
void axpy(float alpha, const float* x, float* y, int64_t n);
void add_weighted_rows(const float* w, int64_t rows, int64_t len, const float* coef, float* y);
void weighted_sum_of_rows(const float* const* rows, int64_t count, int64_t len, const float* coef,
                          const float* then_add, float* y);
} // namespace avx2
namespace avx512 {
void mla_decode(const mla_decode_args& a);
void axpy(float alpha, const float* x, float* y, int64_t n);
void add_weighted_rows(const float* w, int64_t rows, int64_t len, const float* coef, float* y);
void weighted_sum_of_rows(const float* const* rows, int64_t count, int64_t len, const float* coef,
                          const float* then_add, float* y);
} // namespace avx512

} // namespace supernode::kernels::attention_decode
