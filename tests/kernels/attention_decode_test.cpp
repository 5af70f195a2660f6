// Absorbed MLA decode (mla_decode_step), axpy and the weighted row sums on every kernel path the
// CPU has: close to the expanded attention in double precision, the portable path's bits on every
// SIMD path, the bits of axpy row after row for the weighted row sums, and the same bits for a
// token whatever else is in its step and however many threads run it (which changes how many heads
// share a pass over the cache).

#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "tests/kernels/isa_test_util.hpp"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <string>

using namespace supernode::kernels;
using supernode::kernels::testing::random_floats;

namespace {

// Several sequences' latent caches, one query per decode token, and the layer's kv_b.
struct decode_case {
  int64_t heads, nope, rope, v, lora, block_size = 16;
  float scale = 0.2f;
  std::vector<float> kv_b, w_uv_t, q, cache;
  std::vector<int64_t> positions; // token i attends keys 0 .. positions[i] of sequence i
  std::vector<std::vector<const float*>> blocks;

  decode_case(int64_t heads_, int64_t nope_, int64_t rope_, int64_t v_, int64_t lora_,
              std::vector<int64_t> positions_, uint32_t seed)
      : heads(heads_), nope(nope_), rope(rope_), v(v_), lora(lora_), positions(positions_) {
    kv_b = random_floats(heads * (nope + v) * lora, seed, 0.3f);
    w_uv_t = mla_transpose_values(kv_b.data(), heads, nope, v, lora);
    q = random_floats(positions.size() * heads * (nope + rope), seed + 1);
    int64_t max_blocks = 0;
    for (int64_t p : positions) max_blocks = std::max(max_blocks, p / block_size + 1);
    const int64_t per_seq = max_blocks * block_size * (lora + rope);
    cache = random_floats(positions.size() * per_seq, seed + 2);
    blocks.resize(positions.size());
    for (size_t s = 0; s < positions.size(); ++s)
      for (int64_t b = 0; b < max_blocks; ++b)
        blocks[s].push_back(cache.data() + s * per_seq + b * block_size * (lora + rope));
  }

  latent_kv_view view(size_t s) const {
    return {blocks[s], block_size, lora, rope, positions[s] + 1};
  }

  // Tokens `which` in one step; their outputs [n][heads][v].
  std::vector<float> run(const std::vector<size_t>& which, thread_pool& pool) const {
    std::vector<float> out(which.size() * heads * v, -1.0f);
    std::vector<mla_decode_token> tokens;
    for (size_t i = 0; i < which.size(); ++i)
      tokens.push_back({q.data() + which[i] * heads * (nope + rope), view(which[i]),
                        positions[which[i]], out.data() + i * heads * v});
    mla_decode_step({tokens, {kv_b.data(), w_uv_t.data()}, heads, nope, rope, v, lora, scale},
                    pool);
    return out;
  }

  // Token s, head h, value j by the expanded formula in double precision.
  double reference(size_t s, int64_t h, int64_t j) const {
    const int64_t qk = nope + rope, kvw = nope + v, keys = positions[s] + 1;
    const float* qh = q.data() + (s * heads + h) * qk;
    std::vector<double> score(keys);
    double mx = -1e300;
    for (int64_t t = 0; t < keys; ++t) {
      const float* c = view(s).token(t);
      double d = 0;
      for (int64_t n = 0; n < nope; ++n) {
        double k = 0;
        for (int64_t l = 0; l < lora; ++l) k += double(c[l]) * kv_b[(h * kvw + n) * lora + l];
        d += double(qh[n]) * k;
      }
      for (int64_t r = 0; r < rope; ++r) d += double(qh[nope + r]) * c[lora + r];
      score[t] = d * scale;
      mx = std::max(mx, score[t]);
    }
    double sum = 0, o = 0;
    for (int64_t t = 0; t < keys; ++t) {
      const float* c = view(s).token(t);
      double val = 0;
      for (int64_t l = 0; l < lora; ++l)
        val += double(c[l]) * kv_b[(h * kvw + nope + j) * lora + l];
      const double p = std::exp(score[t] - mx);
      sum += p;
      o += p * val;
    }
    return o / sum;
  }
};

void expect_bitwise_equal(const std::vector<float>& a, const float* b, size_t n,
                          const std::string& what) {
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << " differs at " << i << ": " << a[i] << " vs " << b[i];
}

class mla_decode_isa : public supernode::kernels::testing::isa_test {};

TEST_P(mla_decode_isa, matches_the_expanded_attention_in_double_precision) {
  // small's head sizes, and odd ones (tails in every loop: lora 21, rope 5, v 6).
  for (auto [heads, nope, rope, v, lora] :
       {std::tuple{8, 64, 32, 64, 256}, std::tuple{3, 8, 5, 6, 21}}) {
    decode_case c(heads, nope, rope, v, lora, {0, 40, 17}, 7);
    thread_pool pool(2);
    auto out = c.run({0, 1, 2}, pool);
    for (size_t s = 0; s < 3; ++s)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t j = 0; j < c.v; ++j)
          ASSERT_NEAR(out[(s * c.heads + h) * c.v + j], c.reference(s, h, j), 2e-4)
              << "heads " << heads << " token " << s << " head " << h << " value " << j;
  }
}

TEST_P(mla_decode_isa, gives_the_portable_bits) {
  decode_case c(8, 64, 32, 64, 256, {5, 70, 33, 0}, 17);
  thread_pool pool(2);
  auto here = c.run({0, 1, 2, 3}, pool);
  auto y = random_floats(37, 3);
  const auto x = random_floats(37, 4);
  auto y_portable = y;
  axpy(0.37f, x.data(), y.data(), 37);
  set_kernel_isa(kernel_isa::portable);
  auto portable = c.run({0, 1, 2, 3}, pool);
  expect_bitwise_equal(portable, here.data(), here.size(), "step against portable");
  axpy(0.37f, x.data(), y_portable.data(), 37);
  expect_bitwise_equal(y_portable, y.data(), y.size(), "axpy against portable");
}

TEST_P(mla_decode_isa, weighted_rows_contiguous_or_listed_give_the_bits_of_axpy_row_after_row) {
  // The absorptions' shapes (64 rows of 256, 256 rows of 64), and lengths with every kind of
  // tail: fewer floats than a register, a part of the register chunk, more than one chunk.
  for (auto [rows, len] : {std::pair<int64_t, int64_t>{64, 256},
                           {256, 64},
                           {7, 3},
                           {5, 37},
                           {9, 300},
                           {1, 16},
                           {3, 520}}) {
    const auto w = random_floats(rows * len, 5);
    const auto coef = random_floats(rows, 6);
    auto by_axpy = random_floats(len, 7);
    auto by_rows = by_axpy;
    for (int64_t r = 0; r < rows; ++r) axpy(coef[r], w.data() + r * len, by_axpy.data(), len);
    add_weighted_rows(w.data(), rows, len, coef.data(), by_rows.data());
    expect_bitwise_equal(by_axpy, by_rows.data(), by_rows.size(),
                         std::to_string(rows) + " rows of " + std::to_string(len));
    // The same rows listed by pointer, in reverse memory order (as routes point anywhere).
    std::vector<const float*> listed(static_cast<size_t>(rows));
    std::vector<float> reversed(w.size());
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(w.data() + r * len, len, reversed.data() + (rows - 1 - r) * len);
      listed[r] = reversed.data() + (rows - 1 - r) * len;
    }
    // Listed rows make a sum from zero (y's old floats unread), then add another row or not.
    std::vector<float> from_zero(len, 0.0f);
    for (int64_t r = 0; r < rows; ++r) axpy(coef[r], w.data() + r * len, from_zero.data(), len);
    const auto then_add = random_floats(len, 8);
    auto and_then = from_zero;
    for (int64_t e = 0; e < len; ++e) and_then[e] = and_then[e] + then_add[e];
    auto by_list = random_floats(len, 9);
    weighted_sum_of_rows(listed.data(), rows, len, coef.data(), nullptr, by_list.data());
    expect_bitwise_equal(from_zero, by_list.data(), by_list.size(),
                         std::to_string(rows) + " listed rows of " + std::to_string(len));
    by_list = random_floats(len, 10);
    weighted_sum_of_rows(listed.data(), rows, len, coef.data(), then_add.data(), by_list.data());
    expect_bitwise_equal(and_then, by_list.data(), by_list.size(),
                         std::to_string(rows) + " listed rows of " + std::to_string(len) +
                             " and one more row");
  }
}

TEST_P(mla_decode_isa, a_token_gets_the_same_bits_in_any_step_and_thread_count) {
  // Alone on two threads, its heads are cut into two groups of four, on four threads into four
  // of two; in a step of three on two threads, two of four; in a step of five, each task holds
  // all eight heads; on one thread, one group again.
  decode_case c(8, 64, 32, 64, 256, {44, 3, 29, 61, 16}, 27);
  thread_pool four(4), two(2), one(1);
  const auto batch = c.run({0, 1, 2, 3, 4}, two);
  const size_t per_token = static_cast<size_t>(c.heads * c.v);
  for (size_t s = 0; s < 5; ++s) {
    expect_bitwise_equal(c.run({s}, two), batch.data() + s * per_token, per_token,
                         "token " + std::to_string(s) + " alone, two threads");
    expect_bitwise_equal(c.run({s}, four), batch.data() + s * per_token, per_token,
                         "token " + std::to_string(s) + " alone, four threads");
    expect_bitwise_equal(c.run({s}, one), batch.data() + s * per_token, per_token,
                         "token " + std::to_string(s) + " alone, one thread");
  }
  expect_bitwise_equal(c.run({3, 0}, one), batch.data() + 3 * per_token, per_token,
                       "token 3 first of two");
  // Three tokens on two threads: six tasks of four heads.
  expect_bitwise_equal(c.run({0, 1, 2}, two), batch.data(), 3 * per_token,
                       "tokens 0-2 as a step of three, two threads");
}

SUPERNODE_INSTANTIATE_ISA_TESTS(mla_decode_isa);

} // namespace
