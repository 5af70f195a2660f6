// Speculative decoding with the MTP module (model/decode_step.hpp): greedy tokens equal the
// tokens without it, at every draft depth and batch, on the tiny random model (drafts rejected
// almost always, so nearly every step rolls back; mtp_demo_test.cpp runs the trained demo model,
// whose drafts are accepted); the verify forward over several positions
// equals one-token steps bit for bit; rolled-back KV is as if the rejected drafts never
// existed; and speculative sampling keeps the sampling distribution.

#include "kernels/sampling.hpp"
#include "model/decode_step.hpp"
#include "model/engine.hpp"
#include "mtp_tokens.hpp"
#include "tiny_model.hpp"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <map>

using namespace supernode;
using namespace supernode::model;
using supernode::testing::expect_same_tokens_at_every_depth;
using supernode::testing::test_prompt;
using supernode::testing::tiny_weights;

TEST(mtp, greedy_tokens_equal_decoding_without_drafts_when_drafts_are_rejected) {
  expect_same_tokens_at_every_depth(tiny_weights(precision::int8), nullptr);
  expect_same_tokens_at_every_depth(tiny_weights(precision::fp32), nullptr);
  // Drafts from a reduced vocabulary, in both precisions of its head.
  expect_same_tokens_at_every_depth(tiny_weights(precision::int8), nullptr, 1000);
  expect_same_tokens_at_every_depth(tiny_weights(precision::fp32), nullptr, 1000);
}

TEST(mtp, verifying_several_positions_gives_the_bits_of_one_token_steps) {
  auto w = tiny_weights(precision::int8);
  transformer t(w);
  kv_block_pool pool(t.kv_layout(4, true), 64);
  const auto prompt = test_prompt(9, 3);
  const std::vector<int32_t> next{17, 4242, 99, 1234, 7};
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<float> hidden, step_hidden, verify_hidden;

  auto prefilled = [&](kv_block_table& table) {
    table.reserve(pool, n + static_cast<int64_t>(next.size()));
    std::vector<sequence_step> s{{&table, 0, n, attention_mode::prefill}};
    t.forward(prompt, s, pool, hidden);
  };
  kv_block_table one_by_one, together;
  prefilled(one_by_one);
  for (size_t i = 0; i < next.size(); ++i) {
    std::vector<sequence_step> s{
        {&one_by_one, n + static_cast<int64_t>(i), 1, attention_mode::decode}};
    t.forward(std::span(&next[i], 1), s, pool, hidden);
    step_hidden.insert(step_hidden.end(), hidden.begin(), hidden.end());
  }
  prefilled(together);
  std::vector<sequence_step> s{
      {&together, n, static_cast<int64_t>(next.size()), attention_mode::decode}};
  t.forward(next, s, pool, verify_hidden);
  ASSERT_EQ(verify_hidden.size(), step_hidden.size());
  EXPECT_EQ(std::memcmp(verify_hidden.data(), step_hidden.data(), step_hidden.size() * 4), 0);
  // And the KV they wrote, every layer.
  const int64_t layers = pool.layout().layers - 1; // the MTP layer was not run here
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t pos = 0; pos < n + static_cast<int64_t>(next.size()); ++pos)
      EXPECT_EQ(std::memcmp(one_by_one.token_slot(pool, l, pos), together.token_slot(pool, l, pos),
                            pool.layout().token_floats() * 4),
                0)
          << "layer " << l << " position " << pos;
  one_by_one.release(pool);
  together.release(pool);
}

TEST(mtp, rolled_back_kv_is_as_if_the_rejected_drafts_never_existed) {
  // The tiny model's random MTP module drafts wrong tokens almost always: each step writes KV
  // for its drafts and rolls it back. After every step the KV of the positions the table
  // counts equals, bit for bit, the KV of a sequence decoded without drafts to the same length.
  auto w = tiny_weights(precision::int8);
  transformer t(w);
  kv_block_pool pool(t.kv_layout(4, true), 128);
  const auto prompt = test_prompt(7, 11);
  const int64_t n = static_cast<int64_t>(prompt.size()), h = w->config.hidden_size;
  const int64_t main_layers = w->config.num_hidden_layers, tokens = 24;

  auto start = [&](kv_block_table& table, mtp_state* mtp) {
    table.reserve(pool, n + tokens);
    std::vector<sequence_step> s{{&table, 0, n, attention_mode::prefill}};
    std::vector<float> hidden, logits;
    t.forward(prompt, s, pool, hidden);
    table.set_tokens(n);
    if (mtp)
      mtp_prefill(t, std::vector{mtp_prefill_chunk{&table, prompt, 0, n}}, hidden.data(), pool);
    t.logits(hidden.data() + (n - 1) * h, 1, logits);
    const int32_t first = kernels::argmax(logits);
    if (mtp) *mtp = mtp_state_after_prefill(n, std::span(hidden.data() + (n - 1) * h, h), first);
    return first;
  };
  kv_block_table plain_table, spec_table;
  mtp_state spec_mtp;
  std::vector<int32_t> plain{start(plain_table, nullptr)}, spec{start(spec_table, &spec_mtp)};
  decode_stepper plain_stepper(t), spec_stepper(t);
  std::vector<decode_sequence_outcome> out;
  int64_t rejected_steps = 0;
  while (static_cast<int64_t>(spec.size()) < tokens) {
    std::vector<decode_sequence_step> s{
        {&spec_table,
         std::span(&spec.back(), 1),
         &spec_mtp,
         std::min<int64_t>(3, tokens - static_cast<int64_t>(spec.size()) - 1),
         {},
         spec.size()}};
    spec_stepper.step(s, pool, out);
    rejected_steps += out[0].accepted() < out[0].drafted;
    spec.insert(spec.end(), out[0].tokens.begin(), out[0].tokens.end());
    while (plain.size() < spec.size()) {
      std::vector<decode_sequence_step> p{
          {&plain_table, std::span(&plain.back(), 1), nullptr, 0, {}, plain.size()}};
      plain_stepper.step(p, pool, out);
      plain.push_back(out[0].tokens.front());
    }
    ASSERT_EQ(spec, plain);
    ASSERT_EQ(spec_table.tokens(), plain_table.tokens());
    for (int64_t l = 0; l < main_layers; ++l)
      for (int64_t pos = 0; pos < spec_table.tokens(); ++pos)
        ASSERT_EQ(std::memcmp(spec_table.token_slot(pool, l, pos),
                              plain_table.token_slot(pool, l, pos),
                              pool.layout().token_floats() * 4),
                  0)
            << "layer " << l << " position " << pos;
  }
  EXPECT_GT(rejected_steps, 0) << "no draft was rejected: nothing was rolled back";
  plain_table.release(pool);
  spec_table.release(pool);
}

// Speculative sampling's rule on its own: drafts from q, accepted against p, give tokens
// distributed as p. The draws are counter-based, so this runs the same every time; the bound is
// a chi-square test at significance 1e-4 (critical value for 7 degrees of freedom: 29.9).
TEST(mtp, speculative_sampling_emits_the_target_distribution) {
  const std::vector<float> target{2.0f, 1.5f, 0.2f, -1.0f, 0.9f, 1.1f, -0.5f, 0.0f};
  const std::vector<float> draft{0.1f, 2.5f, 1.0f, 0.5f, -2.0f, 1.1f, 0.3f, -1.0f};
  for (const auto& params :
       {kernels::sampling_params{1.0f, 1.0f, 0, 0}, kernels::sampling_params{0.7f, 0.9f, 6, 0}}) {
    std::vector<float> p(target.size()), q(draft.size());
    kernels::sampling_probabilities(target, params, p);
    std::vector<double> count(target.size(), 0.0);
    const int draws = 200000;
    int accepted = 0;
    for (int i = 0; i < draws; ++i) {
      auto s = params;
      s.seed = static_cast<uint64_t>(i);
      const int32_t d = kernels::sample_draft(draft, s, 3, q);
      const auto choice = kernels::verify_draft(target, q, d, s, 3);
      accepted += choice.accepted;
      count[choice.token] += 1.0;
    }
    double chi2 = 0.0;
    int cells = 0;
    for (size_t k = 0; k < p.size(); ++k) {
      if (p[k] == 0.0f) {
        EXPECT_EQ(count[k], 0.0) << "token " << k << " is outside top-k/top-p";
        continue;
      }
      const double expected = p[k] * draws;
      chi2 += (count[k] - expected) * (count[k] - expected) / expected;
      ++cells;
    }
    EXPECT_LT(chi2, cells == 8 ? 29.9 : 27.9) << "temperature " << params.temperature;
    EXPECT_GT(accepted, draws / 10);
    EXPECT_LT(accepted, draws);
  }
}

// End to end on the tiny model: the first two sampled tokens after a prompt, over many seeds,
// with and without drafts. Two-sample chi-square over the (token 1, token 2) pairs seen, at
// significance 1e-4; deterministic seeds make it the same every run.
class sampled_continuations : public ::testing::TestWithParam<int64_t> {};

// GetParam(): the draft vocabulary (0: all tokens; else the lowest ids, so some of the likely
// tokens can never be drafted and q is zero there).
TEST_P(sampled_continuations, keep_their_distribution_with_drafts) {
  auto w = tiny_weights(precision::int8);
  engine_options plain_options, spec_options;
  plain_options.max_context = spec_options.max_context = 64;
  spec_options.mtp_drafts = 2;
  spec_options.mtp_acceptance = draft_acceptance::standard; // reproducible draws are equal anyway
  spec_options.mtp_draft_vocab = GetParam();
  reference_engine plain(w, plain_options), spec(w, spec_options);
  generation_request r;
  r.prompt = test_prompt(6, 21);
  r.max_tokens = 3;
  r.stop_at_eos = false;
  r.sampling = {1.0f, 1.0f, 3, 0};
  std::map<std::pair<int32_t, int32_t>, std::pair<double, double>> pairs;
  const int samples = 1000;
  int64_t drafted = 0;
  for (int i = 0; i < samples; ++i) {
    r.sampling.seed = static_cast<uint64_t>(i);
    const auto a = plain.generate(r);
    pairs[{a.tokens[1], a.tokens[2]}].first += 1.0;
    // Other seeds for the other sample, so the two are independent.
    r.sampling.seed = static_cast<uint64_t>(i) + 1000003;
    const auto b = spec.generate(r);
    drafted += b.drafted_tokens;
    pairs[{b.tokens[1], b.tokens[2]}].second += 1.0;
  }
  EXPECT_GT(drafted, 0);
  double chi2 = 0.0;
  int cells = 0;
  for (auto& [pair, n] : pairs) {
    const double total = n.first + n.second;
    if (total < 10) continue; // too rare for the test
    chi2 += (n.first - n.second) * (n.first - n.second) / total;
    ++cells;
  }
  ASSERT_GT(cells, 3);
  // Chi-square critical values at 1e-4 grow about as df + 4.8 sqrt(df) + 8 here.
  const double df = cells - 1;
  EXPECT_LT(chi2, df + 4.8 * std::sqrt(df) + 8.0) << cells << " cells";
}

INSTANTIATE_TEST_SUITE_P(draft_vocabularies, sampled_continuations, ::testing::Values(0, 64000),
                         [](const auto& info) {
                           return info.param == 0 ? std::string("whole_vocabulary")
                                                  : "lowest_" + std::to_string(info.param);
                         });
