// RMSNorm, RoPE/YaRN, MoE gate, sampling and MLA attention against naive versions written
// from the DeepSeek-V3 reference code's definitions.

#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/moe_gate.hpp"
#include "kernels/rope.hpp"
#include "kernels/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <map>
#include <numbers>
#include <numeric>
#include <random>

using namespace supernode::kernels;

namespace {
std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
} // namespace

TEST(rms_norm, matches_definition_and_is_row_independent) {
  auto x = random_vector(3 * 37, 1), w = random_vector(37, 2);
  std::vector<float> y(3 * 37), y1(37);
  rms_norm(x.data(), 3, 37, 37, w.data(), 1e-6f, y.data(), 37);
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int i = 0; i < 37; ++i) ss += x[r * 37 + i] * double(x[r * 37 + i]);
    double inv = 1.0 / std::sqrt(ss / 37 + 1e-6);
    for (int i = 0; i < 37; ++i) EXPECT_NEAR(y[r * 37 + i], x[r * 37 + i] * inv * w[i], 1e-5);
  }
  rms_norm(x.data() + 37, 1, 37, 37, w.data(), 1e-6f, y1.data(), 37);
  EXPECT_TRUE(std::equal(y1.begin(), y1.end(), y.begin() + 37));
}

TEST(rms_norm, rows_normalized_together_get_the_bits_of_each_alone_and_in_place) {
  // 19 rows: two runs of rows normalized together, then single rows.
  const int rows = 19, dim = 1024;
  auto x = random_vector(rows * dim, 3), w = random_vector(dim, 4);
  std::vector<float> together(rows * dim), alone(dim);
  rms_norm(x.data(), rows, dim, dim, w.data(), 1e-6f, together.data(), dim);
  for (int r = 0; r < rows; ++r) {
    rms_norm(x.data() + r * dim, 1, dim, dim, w.data(), 1e-6f, alone.data(), dim);
    ASSERT_EQ(0, std::memcmp(alone.data(), together.data() + r * dim, dim * sizeof(float)))
        << "row " << r;
  }
  rms_norm(x.data(), rows, dim, dim, w.data(), 1e-6f, x.data(), dim);
  EXPECT_EQ(0, std::memcmp(x.data(), together.data(), together.size() * sizeof(float)));
}

TEST(rope, yarn_frequencies_follow_the_reference_formula) {
  rope_params p{64, 10000.0, true, 40.0, 4096, 32.0, 1.0, 1.0, 1.0};
  rope_table t(p);
  // Straight from DeepSeek-V3 inference/model.py precompute_freqs_cis.
  auto corr = [&](double rot) {
    return 64 * std::log(4096 / (rot * 2 * std::numbers::pi)) / (2 * std::log(10000.0));
  };
  double low = std::max(std::floor(corr(32.0)), 0.0), high = std::min(std::ceil(corr(1.0)), 63.0);
  for (int i = 0; i < 32; ++i) {
    double base = 1.0 / std::pow(10000.0, 2.0 * i / 64);
    double smooth = 1.0 - std::clamp((i - low) / (high - low), 0.0, 1.0);
    double expect = base / 40.0 * (1 - smooth) + base * smooth;
    EXPECT_NEAR(t.inv_freq()[i], expect, 1e-15 * std::max(1.0, expect)) << i;
  }
  EXPECT_DOUBLE_EQ(t.inv_freq()[0], 1.0); // highest frequency extrapolated
  EXPECT_NEAR(t.inv_freq()[31], 1.0 / std::pow(10000.0, 62.0 / 64) / 40.0, 1e-15); // interpolated
}

TEST(rope, rotates_interleaved_pairs_and_keeps_norms) {
  rope_params p{16, 10000.0, false};
  rope_table t(p);
  auto x = random_vector(16, 3);
  auto y = x;
  t.apply(y.data(), 1, 16, 5);
  for (int i = 0; i < 8; ++i) {
    double a = 5 * t.inv_freq()[i];
    EXPECT_NEAR(y[2 * i], x[2 * i] * std::cos(a) - x[2 * i + 1] * std::sin(a), 1e-5);
    EXPECT_NEAR(y[2 * i + 1], x[2 * i] * std::sin(a) + x[2 * i + 1] * std::cos(a), 1e-5);
  }
  auto z = x;
  t.apply(z.data(), 1, 16, 0);
  EXPECT_EQ(z, x); // position 0 is the identity
}

// Positions below tabled_positions read their rotation from the table made at construction,
// later ones compute it per call: both give exactly the floats of the formula, with YaRN.
TEST(rope, tabled_and_computed_positions_give_the_formula_bits) {
  rope_params p{32, 10000.0, true, 40.0, 4096, 32.0, 1.0, 1.0, 1.0};
  rope_table t(p);
  const auto x = random_vector(32, 4);
  for (int64_t pos : {int64_t{1}, int64_t{777}, rope_table::tabled_positions - 1,
                      rope_table::tabled_positions, int64_t{100000}}) {
    auto y = x;
    t.apply(y.data(), 1, 32, pos);
    for (int i = 0; i < 16; ++i) {
      const double angle = static_cast<double>(pos) * t.inv_freq()[i];
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      EXPECT_EQ(y[2 * i], x[2 * i] * c - x[2 * i + 1] * s) << "position " << pos << " pair " << i;
      EXPECT_EQ(y[2 * i + 1], x[2 * i] * s + x[2 * i + 1] * c) << "position " << pos;
    }
  }
}

TEST(moe_gate, matches_the_official_noaux_tc_gate) {
  moe_gate_params p{64, 8, 8, 4, true, true, 2.5f};
  for (uint32_t seed = 0; seed < 50; ++seed) {
    auto logits = random_vector(64, 100 + seed), bias = random_vector(64, 200 + seed, 0.1f);
    int32_t ex[8];
    float wt[8];
    moe_gate(logits.data(), bias, p, ex, wt);
    // Naive: scores, biased, group score = sum of top-2, keep top-4 groups, top-8 experts.
    std::vector<double> s(64), b(64);
    for (int e = 0; e < 64; ++e) {
      s[e] = 1.0 / (1.0 + std::exp(-double(logits[e])));
      b[e] = s[e] + bias[e];
    }
    std::vector<std::pair<double, int>> groups;
    for (int g = 0; g < 8; ++g) {
      std::vector<double> v(b.begin() + g * 8, b.begin() + g * 8 + 8);
      std::sort(v.rbegin(), v.rend());
      groups.push_back({v[0] + v[1], g});
    }
    std::sort(groups.begin(), groups.end(), [](auto x, auto y) { return x.first > y.first; });
    std::vector<std::pair<double, int>> cand;
    for (int i = 0; i < 4; ++i)
      for (int e = groups[i].second * 8; e < groups[i].second * 8 + 8; ++e)
        cand.push_back({b[e], e});
    std::sort(cand.begin(), cand.end(), [](auto x, auto y) { return x.first > y.first; });
    double sum = 0;
    for (int i = 0; i < 8; ++i) sum += s[cand[i].second];
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(ex[i], cand[i].second) << "seed " << seed;
      EXPECT_NEAR(wt[i], s[cand[i].second] / sum * 2.5, 1e-5);
    }
  }
}

TEST(moe_gate, bias_selects_but_does_not_weight) {
  moe_gate_params p{8, 2, 1, 1, true, true, 1.0f};
  std::vector<float> logits(8, 0.0f), bias(8, 0.0f);
  logits[0] = 2.0f; // best score
  bias[5] = 10.0f;  // chosen through the bias alone
  int32_t ex[2];
  float wt[2];
  moe_gate(logits.data(), bias, p, ex, wt);
  EXPECT_EQ(ex[0], 5);
  EXPECT_EQ(ex[1], 0);
  const double s0 = 1 / (1 + std::exp(-2.0)), s5 = 0.5;
  EXPECT_NEAR(wt[0], s5 / (s0 + s5), 1e-6);
  EXPECT_NEAR(wt[1], s0 / (s0 + s5), 1e-6);
}

TEST(moe_gate, ties_go_to_the_lower_index_as_a_full_sort_orders_them) {
  // Logits on a coarse grid, so scores, group scores and biased choices tie often.
  for (const bool grouped : {false, true})
    for (uint32_t seed = 0; seed < 40; ++seed) {
      const moe_gate_params p{64, 8, grouped ? 8 : 1, grouped ? 4 : 1, seed % 2 == 0, true, 1.0f};
      auto logits = random_vector(64, 300 + seed);
      for (auto& l : logits) l = std::round(l * 2.0f) / 2.0f;
      int32_t ex[8];
      float wt[8];
      moe_gate(logits.data(), {}, p, ex, wt);
      // Reference: the same scores, groups kept by a stable sort, then a stable sort of the rest.
      std::vector<float> s(64);
      if (p.sigmoid) {
        for (int e = 0; e < 64; ++e) s[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      } else {
        const float mx = *std::max_element(logits.begin(), logits.end());
        float sum = 0.0f;
        for (int e = 0; e < 64; ++e) sum += s[e] = std::exp(logits[e] - mx);
        for (auto& v : s) v /= sum;
      }
      std::vector<int> allowed(64);
      std::iota(allowed.begin(), allowed.end(), 0);
      if (grouped) {
        std::vector<int> groups(8);
        std::iota(groups.begin(), groups.end(), 0);
        auto best = [&](int g) {
          return *std::max_element(s.begin() + g * 8, s.begin() + g * 8 + 8);
        };
        std::stable_sort(groups.begin(), groups.end(),
                         [&](int a, int b) { return best(a) > best(b); });
        allowed.clear();
        for (int e = 0; e < 64; ++e)
          if (std::find(groups.begin(), groups.begin() + 4, e / 8) != groups.begin() + 4)
            allowed.push_back(e);
      }
      std::stable_sort(allowed.begin(), allowed.end(), [&](int a, int b) { return s[a] > s[b]; });
      for (int i = 0; i < 8; ++i) EXPECT_EQ(ex[i], allowed[i]) << "seed " << seed << " rank " << i;
    }
}

TEST(sampling, greedy_ties_and_seeded_draws) {
  std::vector<float> l{1.0f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(argmax(l), 1);
  sampling_params p{0.0f, 1.0f, 0, 0};
  EXPECT_EQ(sample(l, p, 0), 1);
  p = {1.0f, 1.0f, 0, 42};
  EXPECT_EQ(sample(l, p, 3), sample(l, p, 3));
  // Frequencies follow softmax(l / T) over many steps.
  std::map<int32_t, int> hist;
  for (uint64_t step = 0; step < 20000; ++step) ++hist[sample(l, p, step)];
  double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(-1.0);
  EXPECT_NEAR(hist[1] / 20000.0, std::exp(3.0) / z, 0.02);
  EXPECT_NEAR(hist[0] / 20000.0, std::exp(1.0) / z, 0.02);
  // top_p keeps the smallest prefix reaching p; top_k keeps k.
  p = {1.0f, 0.4f, 0, 7}; // token 1 alone carries 46% >= 0.4
  for (uint64_t step = 0; step < 200; ++step) EXPECT_EQ(sample(l, p, step), 1);
  p = {1.0f, 1.0f, 2, 7};
  for (uint64_t step = 0; step < 200; ++step) {
    auto t = sample(l, p, step);
    EXPECT_TRUE(t == 1 || t == 2);
  }
}

// The sampler's definition, written the slow way: every candidate sorted best first (ties to
// the lower id), weights exp((l - max) / T) in 2^-40 units, top-k then top-p cut, and the draw
// walked in that order.
static int32_t sample_by_full_sort(std::span<const float> l, const sampling_params& p,
                                   uint64_t step) {
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < order.size()) order.resize(p.top_k);
  std::vector<uint64_t> w;
  uint64_t total = 0;
  for (int32_t id : order)
    total += w.emplace_back(static_cast<uint64_t>(
        std::exp((static_cast<double>(l[id]) - l[order[0]]) / p.temperature) * 1099511627776.0));
  if (p.top_p < 1.0f) {
    uint64_t acc = 0;
    size_t keep = 0;
    while (keep < order.size() && static_cast<double>(acc) < p.top_p * static_cast<double>(total))
      acc += w[keep++];
    order.resize(keep);
    total = acc;
  }
  const uint64_t target =
      std::min(total - 1, static_cast<uint64_t>(uniform_from(p.seed, step) * total));
  uint64_t acc = 0;
  for (size_t i = 0; i < order.size(); ++i)
    if (target < (acc += w[i])) return order[i];
  return order.back();
}

TEST(sampling, the_lazy_walk_draws_what_a_full_sort_would) {
  // A vocabulary-sized flat distribution (the walk goes deep) and a peaked one (it stops at
  // once), with ties, under top-k and top-p cuts.
  for (float spread : {0.05f, 4.0f}) {
    auto l = random_vector(129280, 11, spread);
    for (size_t i = 0; i < 64; ++i) l[1000 + i] = l[7]; // ties
    for (sampling_params p :
         {sampling_params{0.8f, 1.0f, 0, 5}, sampling_params{1.0f, 0.9f, 0, 6},
          sampling_params{0.7f, 1.0f, 50, 7}, sampling_params{1.3f, 0.5f, 400, 8}})
      for (uint64_t step = 0; step < 40; ++step)
        ASSERT_EQ(sample(l, p, step), sample_by_full_sort(l, p, step))
            << "spread " << spread << " T " << p.temperature << " top_p " << p.top_p << " top_k "
            << p.top_k << " step " << step;
  }
}

TEST(mla, absorbed_decode_equals_expanded_attention) {
  // One query over 13 cached tokens, 3 heads, computed both ways.
  const int64_t heads = 3, nope = 8, rope = 4, v = 6, lora = 10, keys = 13, bs = 4;
  auto kv_b = random_vector(heads * (nope + v) * lora, 5, 0.3f); // [heads*(nope+v)][lora]
  auto cache = random_vector(((keys + bs - 1) / bs) * bs * (lora + rope), 6);
  std::vector<const float*> blocks;
  for (int64_t b = 0; b * bs < keys; ++b) blocks.push_back(cache.data() + b * bs * (lora + rope));
  latent_kv_view view{blocks, bs, lora, rope, keys};
  auto q = random_vector(heads * (nope + rope), 7);
  // Expanded keys/values.
  std::vector<float> kv(keys * heads * (nope + v), 0.0f);
  for (int64_t t = 0; t < keys; ++t)
    for (int64_t r = 0; r < heads * (nope + v); ++r)
      for (int64_t c = 0; c < lora; ++c)
        kv[t * heads * (nope + v) + r] += view.token(t)[c] * kv_b[r * lora + c];
  std::vector<float> expanded(heads * v);
  mla_prefill(
      {q.data(), kv.data(), view, 1, keys - 1, heads, nope, rope, v, 0.2f, expanded.data()});
  // Absorbed.
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<float> ql(lora, 0.0f), ol(lora);
    for (int64_t d = 0; d < nope; ++d)
      for (int64_t c = 0; c < lora; ++c)
        ql[c] += q[h * (nope + rope) + d] * kv_b[(h * (nope + v) + d) * lora + c];
    mla_decode(
        {ql.data(), q.data() + h * (nope + rope) + nope, view, keys - 1, 1, 0.2f, ol.data()});
    for (int64_t j = 0; j < v; ++j) {
      float o = 0;
      for (int64_t c = 0; c < lora; ++c) o += ol[c] * kv_b[(h * (nope + v) + nope + j) * lora + c];
      EXPECT_NEAR(o, expanded[h * v + j], 1e-4) << h << "," << j;
    }
  }
}

TEST(mla, prefill_is_causal) {
  // Changing a later key never changes an earlier query's output.
  const int64_t heads = 2, nope = 4, rope = 2, v = 3, lora = 5, keys = 6;
  auto cache = random_vector(keys * (lora + rope), 8);
  std::vector<const float*> blocks{cache.data()};
  latent_kv_view view{blocks, keys, lora, rope, keys};
  auto q = random_vector(keys * heads * (nope + rope), 9);
  auto kv = random_vector(keys * heads * (nope + v), 10);
  std::vector<float> a(keys * heads * v), b(keys * heads * v);
  mla_prefill({q.data(), kv.data(), view, keys, 0, heads, nope, rope, v, 0.3f, a.data()});
  for (int64_t i = 0; i < heads * (nope + v); ++i) kv[5 * heads * (nope + v) + i] += 1.0f;
  mla_prefill({q.data(), kv.data(), view, keys, 0, heads, nope, rope, v, 0.3f, b.data()});
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 5 * heads * v, b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + 5 * heads * v, a.end(), b.begin() + 5 * heads * v));
}
