// MLA prefill attention (the flash-attention tiles) on every kernel path the CPU has: close to a
// double-precision softmax, the portable path's bits on every SIMD path, and the same bits for
// a query whether its prompt is prefilled at once or in chunks, on one thread or two. The BF16
// scores (AVX-512 BF16 only) are checked for their error bound and their own chunk invariance.

#include "kernels/attention.hpp"
#include "tests/kernels/isa_test_util.hpp"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <string>

using namespace supernode::kernels;
using supernode::kernels::testing::random_floats;

namespace {

// A prompt's worth of attention inputs: queries, expanded keys/values and the latent cache
// (only its rope part is read by prefill), in blocks of `block_size` tokens.
struct prefill_case {
  int64_t keys, heads, nope, rope, v, lora = 5, block_size = 16;
  float scale;
  std::vector<float> q, kv, cache;
  std::vector<const float*> blocks;

  prefill_case(int64_t keys_, int64_t heads_, int64_t nope_, int64_t rope_, int64_t v_,
               float scale_, uint32_t seed)
      : keys(keys_), heads(heads_), nope(nope_), rope(rope_), v(v_), scale(scale_) {
    q = random_floats(keys * heads * (nope + rope), seed);
    kv = random_floats(keys * heads * (nope + v), seed + 1);
    const int64_t n_blocks = (keys + block_size - 1) / block_size;
    cache = random_floats(n_blocks * block_size * (lora + rope), seed + 2);
    for (int64_t b = 0; b < n_blocks; ++b)
      blocks.push_back(cache.data() + b * block_size * (lora + rope));
  }

  latent_kv_view view(int64_t length) const { return {blocks, block_size, lora, rope, length}; }

  // Queries first .. first + n - 1 (all keys up to the last of them present).
  std::vector<float> run(int64_t first, int64_t n, thread_pool& pool) const {
    std::vector<float> out(n * heads * v, -1.0f);
    mla_prefill({q.data() + first * heads * (nope + rope), kv.data(), view(first + n), n, first,
                 heads, nope, rope, v, scale, out.data()},
                pool);
    return out;
  }

  // Query i, head h, value j in double precision.
  double reference(int64_t i, int64_t h, int64_t j) const {
    const int64_t qk = nope + rope, kvw = nope + v;
    std::vector<double> s(i + 1);
    double mx = -1e300;
    for (int64_t t = 0; t <= i; ++t) {
      const float* qi = q.data() + (i * heads + h) * qk;
      const float* k = kv.data() + (t * heads + h) * kvw;
      const float* kpe = view(keys).token(t) + lora;
      double d = 0;
      for (int64_t c = 0; c < nope; ++c) d += double(qi[c]) * k[c];
      for (int64_t c = 0; c < rope; ++c) d += double(qi[nope + c]) * kpe[c];
      s[t] = d * scale;
      mx = std::max(mx, s[t]);
    }
    double sum = 0, o = 0;
    for (int64_t t = 0; t <= i; ++t) {
      const double p = std::exp(s[t] - mx);
      sum += p;
      o += p * kv[(t * heads + h) * kvw + nope + j];
    }
    return o / sum;
  }
};

void expect_bitwise_equal(const std::vector<float>& a, const float* b, const std::string& what) {
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(float)), 0)
        << what << " differs at " << i << ": " << a[i] << " vs " << b[i];
}

// Chunks crossing key blocks (16) and query tiles (32) at odd places, and leaving partial query
// groups of 1, 2, 3 and 4 (scored as groups of 1, 2 and 4 rather than 8); then chunks that start
// on a softmax step's first key (128) and inside one (228), and one that crosses a step (228 ..
// 267 crosses 256).
constexpr int64_t chunk_sizes[] = {1, 20, 17, 40, 27, 3, 2, 1, 10, 7, 100, 40, 32};
constexpr int64_t chunked_keys = 300; // their sum: three softmax steps of 128 keys

// Prefilling in the chunks above gives the one-shot result's bits.
void expect_chunk_invariant(const prefill_case& c, const std::vector<float>& whole,
                            thread_pool& pool) {
  int64_t first = 0;
  for (int64_t n : chunk_sizes) {
    auto part = c.run(first, n, pool);
    expect_bitwise_equal(part, whole.data() + first * c.heads * c.v,
                         "chunk at " + std::to_string(first));
    first += n;
  }
}

class mla_prefill_isa : public supernode::kernels::testing::isa_test {};

TEST_P(mla_prefill_isa, matches_double_precision_softmax) {
  // Head sizes that are and are not whole vectors: 96 = 64 + 32 (small, DeepSeek-V3's rope) and
  // 13 = 8 + 5 with v = 6 (tails everywhere).
  for (auto [nope, rope, v] : {std::tuple{64, 32, 64}, std::tuple{8, 5, 6}}) {
    prefill_case c(300, 3, nope, rope, v, 0.15f, 11); // across three softmax steps
    thread_pool pool(2);
    auto out = c.run(0, c.keys, pool);
    for (int64_t i = 0; i < c.keys; ++i)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t j = 0; j < c.v; ++j)
          ASSERT_NEAR(out[(i * c.heads + h) * c.v + j], c.reference(i, h, j), 2e-5)
              << "nope " << nope << " query " << i << " head " << h << " value " << j;
  }
}

TEST_P(mla_prefill_isa, gives_the_portable_bits) {
  prefill_case c(300, 2, 64, 32, 64, 0.2f, 21);
  thread_pool pool(2);
  auto here = c.run(0, c.keys, pool);
  set_kernel_isa(kernel_isa::portable);
  auto portable = c.run(0, c.keys, pool);
  expect_bitwise_equal(portable, here.data(), "against portable");
}

TEST_P(mla_prefill_isa, chunks_and_threads_give_the_same_bits) {
  prefill_case c(chunked_keys, 3, 64, 32, 64, 0.15f, 31);
  thread_pool two(2), one(1);
  auto whole = c.run(0, c.keys, two);
  expect_bitwise_equal(c.run(0, c.keys, one), whole.data(), "one thread");
  expect_chunk_invariant(c, whole, two);
}

TEST_P(mla_prefill_isa, extreme_scores_stay_finite) {
  // Scores of ±1e4 after scaling: the running max must absorb a sudden jump and tiny weights.
  prefill_case c(300, 1, 8, 4, 16, 1.0f, 41);
  for (int64_t t = 0; t < c.keys; ++t)
    for (int64_t d = 0; d < 12; ++d) c.q[t * 12 + d] *= (t % 17 == 3) ? 1000.0f : 1.0f;
  thread_pool pool(1);
  auto out = c.run(0, c.keys, pool);
  for (int64_t i = 0; i < c.keys; ++i)
    for (int64_t j = 0; j < c.v; ++j) {
      ASSERT_TRUE(std::isfinite(out[i * c.v + j])) << i << "," << j;
      ASSERT_NEAR(out[i * c.v + j], c.reference(i, 0, j), 1e-4) << i << "," << j;
    }
}

SUPERNODE_INSTANTIATE_ISA_TESTS(mla_prefill_isa);

class mla_prefill_bf16 : public ::testing::Test {
protected:
  void SetUp() override {
    if (!attention_bf16_supported()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
    saved_isa_ = active_kernel_isa();
    set_kernel_isa(best_kernel_isa());
    set_attention_scores(attention_scores::bf16);
  }
  void TearDown() override {
    set_attention_scores(attention_scores::fp32);
    set_kernel_isa(saved_isa_);
  }

private:
  kernel_isa saved_isa_ = kernel_isa::portable;
};

TEST_F(mla_prefill_bf16, differs_from_fp32_within_bf16_rounding_and_is_chunk_invariant) {
  prefill_case c(chunked_keys, 3, 64, 32, 64, 0.15f, 51);
  thread_pool pool(2);
  auto bf16 = c.run(0, c.keys, pool);
  set_attention_scores(attention_scores::fp32);
  auto fp32 = c.run(0, c.keys, pool);
  set_attention_scores(attention_scores::bf16);
  double worst = 0;
  bool any_differs = false;
  for (size_t i = 0; i < fp32.size(); ++i) {
    worst = std::max(worst, double(std::fabs(bf16[i] - fp32[i])));
    any_differs |= bf16[i] != fp32[i];
  }
  // Scores of ~N(0, 96) * 0.15 carry a bf16 error of ~2^-8 of |q||k|: weights move by about 1 %.
  EXPECT_TRUE(any_differs) << "the BF16 path did not run";
  EXPECT_LT(worst, 0.05);
  expect_chunk_invariant(c, bf16, pool);
}

} // namespace
