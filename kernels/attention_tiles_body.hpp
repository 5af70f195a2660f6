// The body of attention_tiles::<isa>::prefill_tile, included once per unit inside its namespace
// (see attention_tiles.hpp). The unit defines SUPERNODE_ATTENTION_WIDTH (floats per register),
// SUPERNODE_ATTENTION_GROUP (queries scored together), SUPERNODE_ATTENTION_SCORE_BLOCKS (key
// blocks scored together: group x score blocks accumulators, as many as its registers hold)
// and, for the BF16 scores, SUPERNODE_ATTENTION_BF16. None of these changes a result: every key
// lane and output element is its own chain of operations. The score and value sums step with
// madd (one rounding); units are built with -ffp-contract=off, so every other a * b + c below is
// a rounded multiply then a rounded add, on every unit alike.

namespace {

constexpr int width = SUPERNODE_ATTENTION_WIDTH;
constexpr int64_t lanes = key_block;
constexpr int parts = lanes / width;
constexpr int group = SUPERNODE_ATTENTION_GROUP;
constexpr int score_blocks = SUPERNODE_ATTENTION_SCORE_BLOCKS;
constexpr float minus_infinity = -__builtin_inff();
constexpr int step_keys = step_blocks * key_block;
static_assert(lanes % width == 0);

// One register of the unit (GCC vector extensions), and the 16 key lanes of a block in `parts`
// of them.
using vn = float __attribute__((vector_size(width * sizeof(float))));
using vni = int32_t __attribute__((vector_size(width * sizeof(float))));
struct v16 {
  vn p[parts];
};

inline vn load(const float* p) {
  return vector_memory::load<vn>(p);
}
inline void store(float* p, vn v) {
  vector_memory::store(p, v);
}
inline vn splat(float x) {
  vn v;
  for (int i = 0; i < width; ++i) v[i] = x;
  return v;
}
// exp(x) for x <= 0, the same bits everywhere (vector_exp.hpp).
inline vn exp_nonpositive(vn x) {
  return vector_math::exp_nonpositive(x);
}

// a + b * c rounded once (a fused multiply-add) in every lane: one instruction where the unit has
// FMA, the C library's fmaf per lane in the portable unit, and the same bits either way. The
// score and value sums take it; every other step is a plain rounded operation.
inline vn madd(vn a, vn b, float c) {
#if SUPERNODE_ATTENTION_WIDTH == 16
  return __builtin_bit_cast(vn, _mm512_fmadd_ps(__builtin_bit_cast(__m512, b), _mm512_set1_ps(c),
                                                __builtin_bit_cast(__m512, a)));
#elif SUPERNODE_ATTENTION_WIDTH == 8
  return __builtin_bit_cast(vn, _mm256_fmadd_ps(__builtin_bit_cast(__m256, b), _mm256_set1_ps(c),
                                                __builtin_bit_cast(__m256, a)));
#else
  for (int i = 0; i < width; ++i) a[i] = __builtin_fmaf(b[i], c, a[i]);
  return a;
#endif
}

inline vn vmax(vn a, vn b) {
  return a > b ? a : b;
}

// The largest lane of one register, by halving it with shuffles (max is exact: the order of the
// comparisons does not matter, so this equals any other order). A template so that only the
// shuffles of the unit's width are instantiated.
template<class V>
inline float hmax_register(V m) {
  constexpr int w = sizeof(V) / sizeof(float);
  const auto fold = [&m](V other) { m = m > other ? m : other; };
  if constexpr (w == 16) {
    fold(__builtin_shufflevector(m, m, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    fold(__builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    fold(__builtin_shufflevector(m, m, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  } else if constexpr (w == 8) {
    fold(__builtin_shufflevector(m, m, 4, 5, 6, 7, 0, 1, 2, 3));
    fold(__builtin_shufflevector(m, m, 2, 3, 0, 1, 6, 7, 4, 5));
  } else {
    static_assert(w == 4);
    fold(__builtin_shufflevector(m, m, 2, 3, 0, 1));
  }
  return m[0] > m[1] ? m[0] : m[1];
}

inline float hmax(const v16& v) {
  vn m = v.p[0];
  for (int i = 1; i < parts; ++i) m = vmax(m, v.p[i]);
  return hmax_register(m);
}

// Key lane numbers of part i: i * width, ..., i * width + width - 1.
inline vni lane_numbers(int part) {
  vni v;
  for (int i = 0; i < width; ++i) v[i] = part * width + i;
  return v;
}

// s[j][g] = the 16 keys of block b + j against query g < G, for j < NB: one running sum per
// lane over d in order. NB blocks at once let each query element loaded feed NB registers, so
// the loop issues more arithmetic than loads. A partial group of n queries (a short chunk, a
// prompt's last queries) is scored as G = 1, 2 or 4 instead of a whole padded group: one query
// after a long prefix costs a chain of qk adds per block rather than `group` chains.
#if defined(SUPERNODE_ATTENTION_BF16)
static_assert(parts == 1, "the BF16 scores are one ZMM register per block");
template<int G, int NB>
inline void scores(const prefill_operands& o, const int64_t* query, int64_t b, v16 (*s)[group]) {
  const uint32_t* kt = o.kt_bf16 + b * o.qk_pairs * lanes;
  const int64_t block_stride = o.qk_pairs * lanes;
  const uint32_t* q[G];
  for (int g = 0; g < G; ++g) q[g] = o.q_bf16 + query[g] * o.q_bf16_stride;
  __m512 acc[NB][G];
  for (int j = 0; j < NB; ++j)
    for (int g = 0; g < G; ++g) acc[j][g] = _mm512_setzero_ps();
  for (int64_t d = 0; d < o.qk_pairs; ++d) {
    __m512bh k[NB];
    for (int j = 0; j < NB; ++j)
      k[j] = __builtin_bit_cast(__m512bh, _mm512_loadu_si512(kt + j * block_stride + d * lanes));
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512bh qg =
          __builtin_bit_cast(__m512bh, _mm512_set1_epi32(static_cast<int>(q[g][d])));
      for (int j = 0; j < NB; ++j) acc[j][g] = _mm512_dpbf16_ps(acc[j][g], k[j], qg);
    }
  }
  for (int j = 0; j < NB; ++j)
    for (int g = 0; g < G; ++g) s[j][g].p[0] = __builtin_bit_cast(vn, acc[j][g]);
}
#else
template<int G, int NB>
inline void scores(const prefill_operands& o, const int64_t* query, int64_t b, v16 (*s)[group]) {
  const float* kt =
      o.pack ? o.block_keys + b % step_blocks * o.qk * lanes : o.kt + b * o.qk * lanes;
  const int64_t block_stride = o.qk * lanes;
  const float* q[G];
  for (int g = 0; g < G; ++g) q[g] = o.q + query[g] * o.q_stride;
  vn acc[NB][G][parts];
  for (int j = 0; j < NB; ++j)
    for (int g = 0; g < G; ++g)
      for (int i = 0; i < parts; ++i) acc[j][g][i] = splat(0.0f);
  for (int64_t d = 0; d < o.qk; ++d) {
    vn k[NB][parts];
    for (int j = 0; j < NB; ++j)
      for (int i = 0; i < parts; ++i) k[j][i] = load(kt + j * block_stride + d * lanes + i * width);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const float qg = q[g][d];
#pragma GCC unroll 4
      for (int j = 0; j < NB; ++j)
#pragma GCC unroll 4
        for (int i = 0; i < parts; ++i) acc[j][g][i] = madd(acc[j][g][i], k[j][i], qg);
    }
  }
  for (int j = 0; j < NB; ++j)
    for (int g = 0; g < G; ++g)
      for (int i = 0; i < parts; ++i) s[j][g].p[i] = acc[j][g][i];
}
#endif

// scores<G, NB> for the n <= group queries of `query` (padded to `group` with copies of the
// last).
template<int NB>
inline void score_group(const prefill_operands& o, int64_t n, const int64_t* query, int64_t b,
                        v16 (*s)[group]) {
  if (n == 1 && group > 1) return scores<1, NB>(o, query, b, s);
  if (n == 2 && group > 2) return scores<2, NB>(o, query, b, s);
  if (n <= 4 && group > 4) return scores<4, NB>(o, query, b, s);
  scores<group, NB>(o, query, b, s);
}

// The scores of blocks b0 .. b0 + blocks - 1 for a group, score_blocks at a time. (A software
// prefetch of the next blocks by a tile's first group was measured slower than none: 4-10 %
// on the whole tile, once the steps were long enough for the hardware prefetcher.)
inline void score_step(const prefill_operands& o, int64_t n, const int64_t* query, int64_t b0,
                       int blocks, v16 (*s)[group]) {
  int j = 0;
  for (; j + score_blocks <= blocks; j += score_blocks)
    score_group<score_blocks>(o, n, query, b0 + j, s + j);
  for (; j < blocks; ++j) score_group<1>(o, n, query, b0 + j, s + j);
}

// y = x * a over n floats (y may be x).
inline void scale_row(const float* x, float a, int64_t n, float* y) {
  int64_t c = 0;
  for (; c + width <= n; c += width) store(y + c, load(x + c) * a);
  for (; c < n; ++c) y[c] = x[c] * a;
}
inline void scale_row(float* y, float a, int64_t n) {
  scale_row(y, a, n, y);
}

// Queries whose value sums run together: each value register loaded feeds this many queries'
// outputs, and their add chains overlap (one query's four chains wait on the add latency).
constexpr int value_queries = width >= 16 ? 4 : 2;

// o[q] += p[q][j] * v_j for the keys j = 0 .. count-1 of packed value block `vb`, in key order,
// for Q queries at once: each output element is still its own chain over the keys in order, so
// the bits are those of one query at a time.
template<int Q>
inline void accumulate_values(const prefill_operands& op, const float* vb, const float* const* p,
                              int count, float* const* o) {
  const int64_t vd = op.vd;
  int64_t c = 0;
  for (; c + 4 * width <= vd; c += 4 * width) {
    vn a[Q][4];
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q)
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) a[q][r] = load(o[q] + c + r * width);
    for (int j = 0; j < count; ++j) {
      const float* v = vb + j * vd + c;
      vn vv[4];
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) vv[r] = load(v + r * width);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q)
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) a[q][r] = madd(a[q][r], vv[r], p[q][j]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q)
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) store(o[q] + c + r * width, a[q][r]);
  }
  for (; c + width <= vd; c += width) {
    vn a[Q];
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) a[q] = load(o[q] + c);
    for (int j = 0; j < count; ++j) {
      const vn v = load(vb + j * vd + c);
#pragma GCC unroll 4
      for (int q = 0; q < Q; ++q) a[q] = madd(a[q], v, p[q][j]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < Q; ++q) store(o[q] + c, a[q]);
  }
  for (; c < vd; ++c)
    for (int q = 0; q < Q; ++q) {
      float acc = o[q][c];
      for (int j = 0; j < count; ++j) acc = __builtin_fmaf(vb[j * vd + c], p[q][j], acc);
      o[q][c] = acc;
    }
}

// accumulate_values<qn> for 1 <= qn <= value_queries.
inline void accumulate_values_of(int qn, const prefill_operands& op, const float* vb,
                                 const float* const* p, int count, float* const* o) {
  if constexpr (value_queries >= 4) {
    if (qn == 4) return accumulate_values<4>(op, vb, p, count, o);
    if (qn == 3) return accumulate_values<3>(op, vb, p, count, o);
  }
  if (qn == 2) return accumulate_values<2>(op, vb, p, count, o);
  accumulate_values<1>(op, vb, p, count, o);
}

// The running state of one query: the max score so far and the sums of exp per key lane; its
// output is kept in place in `out`, unnormalized until the end.
struct query_state {
  float max = minus_infinity;
  float sum[lanes];
};

// Query `i`'s scores for the step from block b0 (s[j][column], j over the step's blocks it
// sees): masks the keys past its position, rescales its state and output to the step's new max,
// and writes the step's weights. Returns the visible keys of the step.
inline int weigh_step(const prefill_operands& o, int64_t i, int64_t b0, const v16 (*s)[group],
                      int column, query_state& st, float* out, float* weights) {
  const int64_t seen = o.first_pos + i - b0 * lanes + 1;
  const int visible = static_cast<int>(seen < step_keys ? seen : step_keys);
  const int used = (visible + static_cast<int>(lanes) - 1) / static_cast<int>(lanes);
  v16 x[step_blocks];
  vn m = splat(minus_infinity);
  for (int j = 0; j < used; ++j)
    for (int r = 0; r < parts; ++r) {
      x[j].p[r] = lane_numbers(r) + j * static_cast<int>(lanes) < visible
                      ? s[j][column].p[r] * o.scale
                      : splat(minus_infinity);
      m = vmax(m, x[j].p[r]);
    }
  const float step_max = hmax_register(m);
  if (step_max > st.max) {
    const float alpha = exp_nonpositive(splat(st.max - step_max))[0];
    scale_row(st.sum, alpha, lanes);
    scale_row(out, alpha, o.vd);
    st.max = step_max;
  }
  const vn max = splat(st.max);
  for (int r = 0; r < parts; ++r) {
    vn p[step_blocks];
    for (int j = 0; j < used; ++j) p[j] = x[j].p[r] - max;
    if (used == step_blocks) { // a whole step: its exps interleave (vector_exp.hpp)
      vector_math::exp_nonpositive_n(p);
    } else {
      for (int j = 0; j < used; ++j) p[j] = exp_nonpositive(p[j]);
    }
    vn sum = load(st.sum + r * width);
    for (int j = 0; j < used; ++j) {
      store(weights + j * lanes + r * width, p[j]);
      sum = sum + p[j];
    }
    store(st.sum + r * width, sum);
  }
  return visible;
}

// Adds a step's values (rows from `vb`) to the outputs of the n queries weighed for it: the keys
// all of a run of value_queries see together, then each query's own further keys (a diagonal
// step).
inline void absorb_values(const prefill_operands& o, const float* vb, int n,
                          float (*weights)[step_keys], const int* visible, float* const* outs) {
  for (int q0 = 0; q0 < n; q0 += value_queries) {
    const int qn = n - q0 < value_queries ? n - q0 : value_queries;
    const float* p[value_queries];
    int common = step_keys;
    for (int q = 0; q < qn; ++q) {
      p[q] = weights[q0 + q];
      common = visible[q0 + q] < common ? visible[q0 + q] : common;
    }
    accumulate_values_of(qn, o, vb, p, common, outs + q0);
    for (int q = 0; q < qn; ++q)
      if (visible[q0 + q] > common) {
        const float* rest = p[q] + common;
        accumulate_values<1>(o, vb + common * o.vd, &rest, visible[q0 + q] - common, outs + q0 + q);
      }
  }
}

} // namespace

void prefill_tile(const prefill_operands& o) {
  query_state state[max_tile_queries];
  // The tile's outputs accumulate here, contiguous, and go to `out` once normalized: rows of
  // `out` are heads * v floats apart (2 KB for small), so a tile's 32 rows would share a few
  // L1 sets and be evicted between the blocks that add to them.
  thread_local std::vector<float> accumulated;
  accumulated.assign(static_cast<size_t>(o.rows * o.vd), 0.0f);
  for (int64_t r = 0; r < o.rows; ++r)
    for (int j = 0; j < lanes; ++j) state[r].sum[j] = 0.0f;
  const int64_t last_pos = o.first_pos + o.i0 + o.rows - 1, last_block = last_pos / lanes;
  for (int64_t b0 = 0; b0 <= last_block; b0 += step_blocks) {
    const int64_t step_end = b0 + step_blocks - 1 < last_block ? b0 + step_blocks - 1 : last_block;
    if (o.pack)
      for (int64_t b = b0; b <= step_end; ++b)
        o.pack(o.pack_context, b, o.block_keys + (b - b0) * o.qk * lanes,
               o.block_values + (b - b0) * lanes * o.vd);
    for (int64_t r0 = 0; r0 < o.rows; r0 += group) {
      const int64_t n = o.rows - r0 < group ? o.rows - r0 : group;
      const int64_t group_last = o.first_pos + o.i0 + r0 + n - 1;
      if (group_last < b0 * lanes) continue; // no query here sees this step
      const int64_t group_end = group_last / lanes < step_end ? group_last / lanes : step_end;
      const int blocks = static_cast<int>(group_end - b0 + 1);
      int64_t query[group];
      for (int g = 0; g < group; ++g) query[g] = o.i0 + r0 + (g < n ? g : n - 1);
      v16 s[step_blocks][group];
      score_step(o, n, query, b0, blocks, s);
      float weights[group][step_keys];
      int visible[group];
      float* outs[group];
      int seeing = 0; // queries of the group that see this step
      for (int64_t g = 0; g < n; ++g)
        if (o.first_pos + query[g] >= b0 * lanes) {
          outs[seeing] = accumulated.data() + (r0 + g) * o.vd;
          visible[seeing] = weigh_step(o, query[g], b0, s, static_cast<int>(g), state[r0 + g],
                                       outs[seeing], weights[seeing]);
          ++seeing;
        }
      absorb_values(o, o.pack ? o.block_values : o.vt + b0 * lanes * o.vd, seeing, weights, visible,
                    outs);
    }
  }
  for (int64_t r = 0; r < o.rows; ++r) {
    float total = 0.0f;
    for (int j = 0; j < lanes; ++j) total = total + state[r].sum[j];
    scale_row(accumulated.data() + r * o.vd, 1.0f / total, o.vd, o.out + (o.i0 + r) * o.out_stride);
  }
}
