// The body of attention_tiles::<isa>::prefill_tile, included once per unit inside its namespace
// (see attention_tiles.hpp). The unit defines SUPERNODE_ATTENTION_GROUP (queries scored
// together: as many accumulators as its registers hold; it does not change any result) and,
// for the BF16 scores, SUPERNODE_ATTENTION_BF16. Units are built with -ffp-contract=off: every
// a * b + c below is a rounded multiply then a rounded add, on every instruction set.
//
// GCC vector extensions give one 16-lane type that each unit lowers to its own registers
// (four SSE, two AVX2 or one AVX-512 register), lane by lane the same IEEE operations.

namespace {

using vf = float __attribute__((vector_size(64)));
using vi = int32_t __attribute__((vector_size(64)));
constexpr int64_t lanes = key_block;
constexpr int group = SUPERNODE_ATTENTION_GROUP;
constexpr float minus_infinity = -__builtin_inff();

inline vf load(const float* p) {
  vf v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) {
  __builtin_memcpy(p, &v, sizeof v);
}
inline vf splat(float x) {
  vf v;
  for (int i = 0; i < lanes; ++i) v[i] = x;
  return v;
}
inline vi lane_index() {
  vi v;
  for (int i = 0; i < lanes; ++i) v[i] = i;
  return v;
}

// exp(x) for x <= 0, the same bits everywhere: x = n ln2 + r (Cody-Waite), exp(r) by Cephes'
// expf polynomial, times 2^n built in the exponent field. 0 below -87 (where expf leaves the
// normal range), so masked (-inf) scores weigh exactly nothing. exp(0) is exactly 1.
inline vf exp_nonpositive(vf x) {
  const vf magic = splat(12582912.0f); // 1.5 * 2^23: adding then subtracting rounds to integer
  const vf xc = x < -87.0f ? splat(-87.0f) : x;
  const vf n = (xc * 1.44269504088896341f + magic) - magic;
  vf r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  const vf y = p * __builtin_bit_cast(vf, e);
  return x < -87.0f ? splat(0.0f) : y;
}

inline float hmax(vf v) {
  float m = v[0];
  for (int i = 1; i < lanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// s[g] = the 16 keys of block `b` against query g: one running sum per lane over d in order.
#if defined(SUPERNODE_ATTENTION_BF16)
inline void scores(const prefill_operands& o, const int64_t* query, int64_t b, vf* s) {
  const uint32_t* kt = o.kt_bf16 + b * o.qk_pairs * lanes;
  const uint32_t* q[group];
  for (int g = 0; g < group; ++g) q[g] = o.q_bf16 + query[g] * o.q_bf16_stride;
  __m512 acc[group];
  for (int g = 0; g < group; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t d = 0; d < o.qk_pairs; ++d) {
    const __m512bh k = __builtin_bit_cast(__m512bh, _mm512_loadu_si512(kt + d * lanes));
#pragma GCC unroll 8
    for (int g = 0; g < group; ++g)
      acc[g] = _mm512_dpbf16_ps(
          acc[g], k, __builtin_bit_cast(__m512bh, _mm512_set1_epi32(static_cast<int>(q[g][d]))));
  }
  for (int g = 0; g < group; ++g) s[g] = __builtin_bit_cast(vf, acc[g]);
}
#else
inline void scores(const prefill_operands& o, const int64_t* query, int64_t b, vf* s) {
  const float* kt = o.kt + b * o.qk * lanes;
  const float* q[group];
  for (int g = 0; g < group; ++g) q[g] = o.q + query[g] * o.q_stride;
  vf acc[group];
  for (int g = 0; g < group; ++g) acc[g] = splat(0.0f);
  for (int64_t d = 0; d < o.qk; ++d) {
    const vf k = load(kt + d * lanes);
#pragma GCC unroll 8
    for (int g = 0; g < group; ++g) acc[g] = acc[g] + k * q[g][d];
  }
  for (int g = 0; g < group; ++g) s[g] = acc[g];
}
#endif

// y *= a over n floats.
inline void scale_row(float* y, float a, int64_t n) {
  int64_t c = 0;
  for (; c + lanes <= n; c += lanes) store(y + c, load(y + c) * a);
  for (; c < n; ++c) y[c] = y[c] * a;
}

// o += p[j] * v_j for the keys j = 0 .. count-1 of packed value block `vb`, in key order: four
// vectors of o at a time, so four add chains overlap.
inline void accumulate_values(const prefill_operands& op, const float* vb, const float* p,
                              int count, float* o) {
  const int64_t vd = op.vd;
  int64_t c = 0;
  for (; c + 4 * lanes <= vd; c += 4 * lanes) {
    vf a0 = load(o + c), a1 = load(o + c + lanes), a2 = load(o + c + 2 * lanes),
       a3 = load(o + c + 3 * lanes);
    for (int j = 0; j < count; ++j) {
      const float* v = vb + j * vd + c;
      a0 = a0 + load(v) * p[j];
      a1 = a1 + load(v + lanes) * p[j];
      a2 = a2 + load(v + 2 * lanes) * p[j];
      a3 = a3 + load(v + 3 * lanes) * p[j];
    }
    store(o + c, a0);
    store(o + c + lanes, a1);
    store(o + c + 2 * lanes, a2);
    store(o + c + 3 * lanes, a3);
  }
  for (; c + lanes <= vd; c += lanes) {
    vf acc = load(o + c);
    for (int j = 0; j < count; ++j) acc = acc + load(vb + j * vd + c) * p[j];
    store(o + c, acc);
  }
  for (; c < vd; ++c) {
    float acc = o[c];
    for (int j = 0; j < count; ++j) acc = acc + vb[j * vd + c] * p[j];
    o[c] = acc;
  }
}

// The running state of one query: the max score so far, the sums of exp per lane, and the
// output (kept in place in `out`, unnormalized until the end).
struct query_state {
  float max = minus_infinity;
  vf sum;
};

// One block's scores for query `i`: masks the keys past its position, rescales its state to the
// block's new max, adds the block's weights and values.
inline void absorb_block(const prefill_operands& o, int64_t i, int64_t b, vf score,
                         query_state& st) {
  const int64_t t0 = b * lanes, pos = o.first_pos + i;
  const int64_t visible = pos - t0 + 1 < lanes ? pos - t0 + 1 : lanes;
  const vf x =
      lane_index() < static_cast<int32_t>(visible) ? score * o.scale : splat(minus_infinity);
  const float block_max = hmax(x);
  float* out = o.out + i * o.out_stride;
  if (block_max > st.max) {
    const float alpha = exp_nonpositive(splat(st.max - block_max))[0];
    st.sum = st.sum * alpha;
    scale_row(out, alpha, o.vd);
    st.max = block_max;
  }
  const vf p = exp_nonpositive(x - st.max);
  st.sum = st.sum + p;
  float weights[lanes];
  store(weights, p);
  accumulate_values(o, o.vt + b * lanes * o.vd, weights, static_cast<int>(visible), out);
}

} // namespace

void prefill_tile(const prefill_operands& o) {
  query_state state[max_tile_queries];
  for (int64_t r = 0; r < o.rows; ++r) {
    state[r].sum = splat(0.0f);
    float* out = o.out + (o.i0 + r) * o.out_stride;
    for (int64_t c = 0; c < o.vd; ++c) out[c] = 0.0f;
  }
  const int64_t last_pos = o.first_pos + o.i0 + o.rows - 1;
  for (int64_t b = 0; b * lanes <= last_pos; ++b) {
    for (int64_t r0 = 0; r0 < o.rows; r0 += group) {
      const int64_t n = o.rows - r0 < group ? o.rows - r0 : group;
      if (o.first_pos + o.i0 + r0 + n - 1 < b * lanes) continue; // no query here sees block b
      int64_t query[group];
      for (int g = 0; g < group; ++g) query[g] = o.i0 + r0 + (g < n ? g : n - 1);
      vf s[group];
      scores(o, query, b, s);
      for (int64_t g = 0; g < n; ++g)
        if (o.first_pos + query[g] >= b * lanes) absorb_block(o, query[g], b, s[g], state[r0 + g]);
    }
  }
  for (int64_t r = 0; r < o.rows; ++r) {
    float total = 0.0f;
    for (int j = 0; j < lanes; ++j) total = total + state[r].sum[j];
    scale_row(o.out + (o.i0 + r) * o.out_stride, 1.0f / total, o.vd);
  }
}
