// The body of attention_decode::<isa>::{mla_decode, axpy, add_weighted_rows}, included once per
// unit inside its namespace (see attention_decode.hpp). The unit defines SUPERNODE_DECODE_WIDTH,
// the floats of one of its registers.

namespace {

constexpr int width = SUPERNODE_DECODE_WIDTH;
constexpr int64_t dot_lanes = 16;
constexpr int parts = dot_lanes / width;
// Heads scored together in one pass over the cache: each token's row is loaded once for all of
// them, and their accumulators fill about half the registers.
constexpr int heads_per_pass = 8 / parts; // parts <= 4
static_assert(dot_lanes % width == 0);

using vn = float __attribute__((vector_size(width * sizeof(float))));

inline vn load(const float* p) {
  return vector_memory::load<vn>(p);
}
inline void store(float* p, vn v) {
  vector_memory::store(p, v);
}

// The sum of the 16 dot lanes held in `parts` registers, as a tree: lane j + lane j + half for
// half = 8, 4, 2, 1 (the order every width shares), in registers. (Through a stack array, the
// tree's 15 scalar adds and 16 stores were, with 8 heads, as many operations per cached token
// as its dot products.)
template<int W> // `width`, as a parameter so only the matching branch is compiled
inline float tree_sum(const vn (&acc)[dot_lanes / W]) {
  using v8 = float __attribute__((vector_size(8 * sizeof(float))));
  using v4 = float __attribute__((vector_size(4 * sizeof(float))));
  using v2 = float __attribute__((vector_size(2 * sizeof(float))));
  v8 h8;
  if constexpr (W == 16) {
    h8 = __builtin_shufflevector(acc[0], acc[0], 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(acc[0], acc[0], 8, 9, 10, 11, 12, 13, 14, 15);
  } else if constexpr (W == 8) {
    h8 = acc[0] + acc[1];
  } else {
    static_assert(W == 4);
    h8 = __builtin_shufflevector(acc[0] + acc[2], acc[1] + acc[3], 0, 1, 2, 3, 4, 5, 6, 7);
  }
  const v4 h4 =
      __builtin_shufflevector(h8, h8, 0, 1, 2, 3) + __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
  const v2 h2 = __builtin_shufflevector(h4, h4, 0, 1) + __builtin_shufflevector(h4, h4, 2, 3);
  return h2[0] + h2[1];
}

// out[h] = q_h · c for the H rows q_h = q + h * ldq, n floats each (see attention_decode.hpp).
// Always inlined: called twice per cached key, and as a call (which GCC chose once
// decode_heads grew) the scores pass took 5-10 % longer.
template<int H>
[[gnu::always_inline]] inline void dots(const float* q, int64_t ldq, const float* c, int64_t n,
                                        float* out) {
  vn acc[H][parts];
  for (int h = 0; h < H; ++h)
    for (int p = 0; p < parts; ++p) acc[h][p] = vn{};
  const auto chunk = [&](const float* cc, auto q_at) {
    vn cv[parts];
    for (int p = 0; p < parts; ++p) cv[p] = load(cc + p * width);
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h)
      for (int p = 0; p < parts; ++p) acc[h][p] = acc[h][p] + load(q_at(h) + p * width) * cv[p];
  };
  int64_t i = 0;
  for (; i + dot_lanes <= n; i += dot_lanes) chunk(c + i, [&](int h) { return q + h * ldq + i; });
  if (i < n) {
    float cpad[dot_lanes] = {}, qpad[H][dot_lanes] = {};
    __builtin_memcpy(cpad, c + i, (n - i) * sizeof(float));
    for (int h = 0; h < H; ++h) __builtin_memcpy(qpad[h], q + h * ldq + i, (n - i) * sizeof(float));
    chunk(cpad, [&](int h) { return static_cast<const float*>(qpad[h]); });
  }
  for (int h = 0; h < H; ++h) out[h] = tree_sum<width>(acc[h]);
}

// Registers of each head's output per pass over the keys, H heads at once: 16 accumulators
// on AVX-512's 32 registers, 8 on the 16 of AVX2 and SSE2 (the rest hold the row's loads).
// One register per pass walked every cached row once per 16 floats, with one multiply and add
// per head for each row load; several read a run of whole lines of each row per visit, in a
// quarter of the passes (the step at 530 keys, two threads, cache in L2: 9 % faster).
constexpr int value_accumulators = width == 16 ? 16 : 8;
template<int H>
constexpr int value_registers = value_accumulators / H > 0 ? value_accumulators / H : 1;

// out_h[l .. l + C * width) = sum over t, in order, of p_h[t] * row_t: each element one chain
// from zero, whatever C is, so the bits do not depend on how the row is cut.
template<int H, int C>
inline void weighted_values(const float* const* rows, int64_t keys, int64_t l, const float* p,
                            float* out, int64_t ld) {
  vn acc[H][C];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c) acc[h][c] = vn{};
  for (int64_t t = 0; t < keys; ++t) {
    vn cv[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) cv[c] = load(rows[t] + l + c * width);
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      const float ph = p[h * keys + t];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[h][c] = acc[h][c] + cv[c] * ph;
    }
  }
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < C; ++c) store(out + h * ld + l + c * width, acc[h][c]);
}

// Heads h0 .. h0 + H - 1 of a.
template<int H>
void decode_heads(const mla_decode_args& a, int64_t h0, const float* const* rows, int64_t keys,
                  float* p) {
  const int64_t lora = a.cache.kv_lora, rope = a.cache.rope;
  const int64_t pe_stride = a.q_pe_stride > 0 ? a.q_pe_stride : rope;
  const int64_t ld = a.latent_stride > 0 ? a.latent_stride : lora;
  const float* ql = a.q_latent + h0 * ld;
  const float* qp = a.q_pe + h0 * pe_stride;
  for (int64_t t = 0; t < keys; ++t) {
    float s_lat[H], s_pe[H];
    dots<H>(ql, ld, rows[t], lora, s_lat);
    dots<H>(qp, pe_stride, rows[t] + lora, rope, s_pe);
    for (int h = 0; h < H; ++h) p[h * keys + t] = (s_lat[h] + s_pe[h]) * a.softmax_scale;
  }
  for (int h = 0; h < H; ++h) kernels::softmax(p + h * keys, keys);
  // out_h = sum over t, in order, of p_h[t] * c_t: each element one chain from zero.
  float* out = a.out_latent + h0 * ld;
  constexpr int wide = value_registers<H>;
  int64_t l = 0;
  for (; l + wide * width <= lora; l += wide * width)
    weighted_values<H, wide>(rows, keys, l, p, out, ld);
  for (; l + width <= lora; l += width) weighted_values<H, 1>(rows, keys, l, p, out, ld);
  for (; l < lora; ++l)
    for (int h = 0; h < H; ++h) {
      float acc = 0.0f;
      for (int64_t t = 0; t < keys; ++t) acc = acc + rows[t][l] * p[h * keys + t];
      out[h * ld + l] = acc;
    }
}

// Where row r of a weighted row sum starts: rows `len` floats apart, or listed one by one.
struct contiguous_rows {
  const float* w;
  int64_t len;
  const float* operator()(int64_t r) const { return w + r * len; }
};
struct listed_rows {
  const float* const* rows;
  const float* operator()(int64_t r) const { return rows[r]; }
};

// The weighted row sum over R registers of y, floats e .. e + R * width - 1, which stay in them
// while every row is added in: from `start`'s floats (zero when null), then + `then_add`'s (when
// not null).
template<int R, class Rows>
void weighted_rows_chunk(const Rows& row_at, int64_t rows, int64_t e, const float* coef,
                         const float* start, const float* then_add, float* y) {
  vn acc[R];
#pragma GCC unroll 16
  for (int j = 0; j < R; ++j) acc[j] = start ? load(start + e + j * width) : vn{};
  for (int64_t r = 0; r < rows; ++r) {
    const float c = coef[r];
    const float* wr = row_at(r) + e;
#pragma GCC unroll 16
    for (int j = 0; j < R; ++j) acc[j] = acc[j] + load(wr + j * width) * c;
  }
  if (then_add)
#pragma GCC unroll 16
    for (int j = 0; j < R; ++j) acc[j] = acc[j] + load(then_add + e + j * width);
#pragma GCC unroll 16
  for (int j = 0; j < R; ++j) store(y + e + j * width, acc[j]);
}

// Registers of y per pass over the rows: half of AVX-512's 32, three quarters of the 16 of
// AVX2 and SSE2 (the rest hold the row's loads).
constexpr int chunk_regs = width == 16 ? 16 : 12;

template<class Rows, int... R>
constexpr auto chunk_table(std::integer_sequence<int, R...>) {
  using fn =
      void (*)(const Rows&, int64_t, int64_t, const float*, const float*, const float*, float*);
  return std::array<fn, sizeof...(R)>{weighted_rows_chunk<R + 1, Rows>...};
}
template<class Rows>
constexpr auto chunk_by_regs = chunk_table<Rows>(std::make_integer_sequence<int, chunk_regs>{});

// y = (start + coef[r] * row r for r = 0 .. rows - 1 in order) + then_add, element by element;
// a null start is zero, a null then_add adds nothing.
template<class Rows>
void weighted_rows(const Rows& row_at, int64_t rows, int64_t len, const float* coef,
                   const float* start, const float* then_add, float* y) {
  int64_t e = 0;
  while (e + width <= len) {
    const int64_t fit = (len - e) / width, regs = fit < chunk_regs ? fit : chunk_regs;
    chunk_by_regs<Rows>[regs - 1](row_at, rows, e, coef, start, then_add, y);
    e += regs * width;
  }
  for (; e < len; ++e) {
    float acc = start ? start[e] : 0.0f;
    for (int64_t r = 0; r < rows; ++r) acc = acc + row_at(r)[e] * coef[r];
    if (then_add) acc = acc + then_add[e];
    y[e] = acc;
  }
}

template<int... H>
constexpr auto decode_table(std::integer_sequence<int, H...>) {
  using fn = void (*)(const mla_decode_args&, int64_t, const float* const*, int64_t, float*);
  return std::array<fn, sizeof...(H)>{decode_heads<H + 1>...};
}
constexpr auto decode_by_heads = decode_table(std::make_integer_sequence<int, heads_per_pass>{});

} // namespace

void mla_decode(const mla_decode_args& a) {
  const int64_t keys = a.pos + 1;
  if (keys <= 0 || a.heads <= 0) return;
  // Per thread, reused across calls: the rows of every key, and the scores of one pass.
  thread_local std::vector<const float*> rows;
  thread_local std::vector<float> scores;
  rows.resize(static_cast<size_t>(keys));
  for (int64_t t = 0; t < keys; ++t) rows[t] = a.cache.token(t);
  scores.resize(static_cast<size_t>(keys * heads_per_pass));
  for (int64_t h0 = 0; h0 < a.heads; h0 += heads_per_pass) {
    const int64_t hn = a.heads - h0 < heads_per_pass ? a.heads - h0 : heads_per_pass;
    decode_by_heads[hn - 1](a, h0, rows.data(), keys, scores.data());
  }
}

void add_weighted_rows(const float* w, int64_t rows, int64_t len, const float* coef, float* y) {
  weighted_rows(contiguous_rows{w, len}, rows, len, coef, y, nullptr, y);
}

void weighted_sum_of_rows(const float* const* rows, int64_t count, int64_t len, const float* coef,
                          const float* then_add, float* y) {
  weighted_rows(listed_rows{rows}, count, len, coef, nullptr, then_add, y);
}

void axpy(float alpha, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + width <= n; i += width) store(y + i, load(y + i) + load(x + i) * alpha);
  for (; i < n; ++i) y[i] = y[i] + x[i] * alpha;
}
