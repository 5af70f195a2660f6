#include "kernels/attention.hpp"

#include <algorithm>
#include <vector>

#include "kernels/elementwise.hpp"

namespace supernode::kernels {

namespace {
// The simd reduction order is fixed at compile time, so it is the same for every call.
float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i)
    s += a[i] * b[i];
  return s;
}
} // namespace

void mla_prefill(const mla_prefill_args& a, thread_pool& pool) {
  const int64_t qk = a.nope + a.rope, kvw = a.nope + a.v;
  // One task per (query, head): the unit of work whose result must not depend on the others.
  pool.parallel_for(a.n_queries * a.heads, [&](int64_t task) {
    const int64_t i = task / a.heads, h = task % a.heads;
    const int64_t keys = a.first_pos + i + 1;
    const float* q = a.q + (i * a.heads + h) * qk;
    std::vector<float> p(keys);
    for (int64_t t = 0; t < keys; ++t) {
      const float* k = a.kv + (t * a.heads + h) * kvw;
      const float* kpe = a.cache.token(t) + a.cache.kv_lora;
      p[t] = (dot(q, k, a.nope) + dot(q + a.nope, kpe, a.rope)) * a.softmax_scale;
    }
    softmax(p.data(), keys);
    float* o = a.out + (i * a.heads + h) * a.v;
    std::fill(o, o + a.v, 0.0f);
    for (int64_t t = 0; t < keys; ++t)
      axpy(p[t], a.kv + (t * a.heads + h) * kvw + a.nope, o, a.v);
  });
}

void mla_decode(const mla_decode_args& a) {
  const int64_t keys = a.pos + 1, lora = a.cache.kv_lora, rope = a.cache.rope;
  std::vector<float> p(keys);
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* ql = a.q_latent + h * lora;
    const float* qp = a.q_pe + h * rope;
    for (int64_t t = 0; t < keys; ++t) {
      const float* c = a.cache.token(t);
      p[t] = (dot(ql, c, lora) + dot(qp, c + lora, rope)) * a.softmax_scale;
    }
    softmax(p.data(), keys);
    float* o = a.out_latent + h * lora;
    std::fill(o, o + lora, 0.0f);
    for (int64_t t = 0; t < keys; ++t)
      axpy(p[t], a.cache.token(t), o, lora);
  }
}

} // namespace supernode::kernels
