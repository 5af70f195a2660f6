// run_experts gives the same bits whichever schedule spreads the experts over the pool: the
// grouped GEMMs a decode uses, and one expert per thread as a long prefill runs them.

#include "kernels/elementwise.hpp"
#include "model/moe_layer.hpp"
#include "tiny_model.hpp"

#include <gtest/gtest.h>
#include <random>

using namespace supernode;

namespace {

// One batch per expert with an uneven number of rows (some none), random INT8 tokens in
// the INT8 build and random floats in the FP32 one.
std::vector<model::expert_batch> random_batches(const model::model_config& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t h = c.hidden_size;
  std::vector<model::expert_batch> batches(c.n_routed_experts);
  for (int32_t e = 0; e < c.n_routed_experts; ++e) {
    auto& b = batches[e];
    b.expert = e;
    b.rows = e % 5 == 3 ? 0 : 1 + static_cast<int64_t>(rng() % 200);
    std::vector<float> x(b.rows * h);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : x) v = d(rng);
    kernels::quantize_rows(x.data(), b.rows, h, h, b.in_q);
    b.in_f = std::move(x);
  }
  return batches;
}

std::vector<float> outputs(model::precision prec, model::expert_schedule schedule) {
  const auto weights = supernode::testing::tiny_weights(prec);
  const auto& c = weights->config;
  auto batches = random_batches(c, 11);
  std::vector<model::expert_batch*> pointers;
  for (auto& b : batches) pointers.push_back(&b);
  const auto& layer = weights->layers.back();
  EXPECT_TRUE(layer.is_moe);
  model::run_experts(c, layer.moe, prec, pointers, schedule);
  std::vector<float> all;
  for (auto& b : batches)
    all.insert(all.end(), b.out.begin(), b.out.begin() + b.rows * c.hidden_size);
  return all;
}

class moe_layer_test : public ::testing::TestWithParam<model::precision> {};

TEST_P(moe_layer_test, every_expert_schedule_gives_the_same_bits) {
  const auto grouped = outputs(GetParam(), model::expert_schedule::grouped);
  ASSERT_FALSE(grouped.empty());
  EXPECT_EQ(grouped, outputs(GetParam(), model::expert_schedule::one_per_thread));
  EXPECT_EQ(grouped, outputs(GetParam(), model::expert_schedule::automatic));
}

// The shared expert runs as a batch of its own beside the routed ones (expert_batch::weights):
// its rows get the bits a plain MLP forward gives them (gate_up, SiLU·up, down), under every
// schedule, and an MLP wider than the experts (a shared expert of n_shared_experts > 1) keeps
// its own width.
TEST_P(moe_layer_test, a_batch_with_its_own_mlp_gets_that_mlps_bits_among_the_experts) {
  const auto prec = GetParam();
  const auto weights = supernode::testing::tiny_weights(prec);
  const auto& c = weights->config;
  const int64_t h = c.hidden_size, inter = 2 * c.moe_intermediate_size, rows = 37;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.5f);
  auto random = [&](int64_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  };
  model::mlp_weights wide;
  wide.intermediate = inter;
  wide.gate_up = model::linear::from_float(random(2 * inter * h).data(), 2 * inter, h, prec);
  wide.down = model::linear::from_float(random(h * inter).data(), h, inter, prec);
  const auto x = random(rows * h);

  // The MLP forward of the transformer's dense layers, on the same rows.
  kernels::quantized_rows xq, scratch;
  kernels::quantize_rows(x.data(), rows, h, h, xq);
  std::vector<float> up(rows * 2 * inter), act(rows * inter), expected(rows * h);
  if (prec == model::precision::int8)
    wide.gate_up.forward(xq, up.data(), 2 * inter);
  else
    wide.gate_up.forward(x.data(), rows, h, up.data(), 2 * inter, scratch);
  for (int64_t r = 0; r < rows; ++r)
    kernels::silu_mul(up.data() + r * 2 * inter, up.data() + r * 2 * inter + inter,
                      act.data() + r * inter, inter);
  wide.down.forward(act.data(), rows, inter, expected.data(), h, scratch);

  for (auto schedule : {model::expert_schedule::grouped, model::expert_schedule::one_per_thread}) {
    auto batches = random_batches(c, 11);
    model::expert_batch own;
    own.weights = &wide;
    own.rows = rows;
    own.in_q = xq;
    own.in_f = x;
    std::vector<model::expert_batch*> pointers{&own};
    for (auto& b : batches) pointers.push_back(&b);
    model::run_experts(c, weights->layers.back().moe, prec, pointers, schedule);
    EXPECT_EQ(std::vector<float>(own.out.begin(), own.out.begin() + rows * h), expected)
        << (schedule == model::expert_schedule::grouped ? "grouped" : "one per thread");
  }
}

// The one_per_thread schedule hands the pool its experts largest first, dealt in turn into the
// pool's contiguous shares, so each thread starts on a large one and ends on small ones.
TEST(largest_first_in_shares, deals_the_largest_batches_first_into_each_share) {
  std::vector<model::expert_batch> batches(6);
  const int64_t rows[] = {5, 100, 30, 7, 60, 1};
  std::vector<model::expert_batch*> pointers;
  for (int i = 0; i < 6; ++i) {
    batches[i].expert = i;
    batches[i].rows = rows[i];
    pointers.push_back(&batches[i]);
  }
  auto rows_in_order = [](std::span<model::expert_batch* const> p, int shares) {
    std::vector<int64_t> r;
    for (auto* b : model::largest_first_in_shares(p, shares)) r.push_back(b->rows);
    return r;
  };
  // Two shares of three: [100, 30, 5] and [60, 7, 1].
  EXPECT_EQ(rows_in_order(pointers, 2), (std::vector<int64_t>{100, 30, 5, 60, 7, 1}));
  EXPECT_EQ(rows_in_order(pointers, 3), (std::vector<int64_t>{100, 7, 60, 5, 30, 1}));
  EXPECT_EQ(rows_in_order(pointers, 1), (std::vector<int64_t>{100, 60, 30, 7, 5, 1}));
  // More shares than batches: one each, largest first.
  EXPECT_EQ(rows_in_order(pointers, 8), (std::vector<int64_t>{100, 60, 30, 7, 5, 1}));
  // Five into shares of two and three (the pool's cut): the first share fills, the rest go on.
  EXPECT_EQ(rows_in_order(std::span(pointers).first(5), 2),
            (std::vector<int64_t>{100, 30, 60, 7, 5}));
  EXPECT_TRUE(model::largest_first_in_shares({}, 2).empty());

  // Equal rows keep their order.
  batches[2].rows = batches[4].rows = 60;
  const auto order = model::largest_first_in_shares(pointers, 1);
  EXPECT_EQ(order[1]->expert, 2);
  EXPECT_EQ(order[2]->expert, 4);
}

INSTANTIATE_TEST_SUITE_P(precisions, moe_layer_test,
                         ::testing::Values(model::precision::int8, model::precision::fp32),
                         [](const auto& info) {
                           return std::string(model::precision_name(info.param));
                         });

} // namespace
