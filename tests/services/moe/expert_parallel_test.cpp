// FusedDispatch/FusedCombine over a rank fabric, ranks as threads: every op must give the
// single-process MoE's bits exactly, for any EP degree, any spread of tokens over ranks
// (ranks with none, batch 1, the full local batch) and the most adversarial routing (every
// token of every rank to the experts of one rank); a whole model run over EP ranks must give the
// reference transformer's tokens (microbatched too, and across EPLB re-placements on a skewed
// gate); a rank that leaves breaks the group without hanging it.

#include "../../model/tiny_model.hpp"
#include "model/moe_layer.hpp"
#include "model/transformer.hpp"
#include "services/moe/expert_parallel.hpp"
#include "services/moe/local_group.hpp"
#include "services/moe/microbatch_pipeline.hpp"
#include "services/moe/skewed_routing.hpp"

#include <atomic>
#include <cstring>
#include <functional>
#include <gtest/gtest.h>
#include <random>
#include <stdexcept>
#include <thread>

using namespace supernode;
using services::ep_options;
using services::expert_parallel;

namespace {

// Runs body(rank, ep) on `ranks` threads, each with its own fabric and expert_parallel.
void run_group(const std::string& kind, int ranks, const ep_options& base,
               std::shared_ptr<const model::model_weights> weights,
               const services::local_rank_body& body) {
  services::local_group_options o;
  o.fabric = kind;
  o.cluster = "eptest";
  o.ranks = ranks;
  o.ep = base;
  const auto errors = services::run_local_group(o, weights, body);
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// The single-process MoE (as the transformer runs it), for comparison.
std::vector<float> local_moe(const model::model_weights& weights, const model::moe_weights& w,
                             const std::vector<float>& x, int64_t rows) {
  const auto& c = weights.config;
  const int64_t h = c.hidden_size, k = c.num_experts_per_tok;
  auto [routing, batches, row_of] = model::route_and_gather_int8(c, w, x.data(), rows);
  std::vector<model::expert_batch*> pointers;
  for (auto& b : batches) pointers.push_back(&b);
  model::run_experts(c, w, weights.prec, pointers);
  std::vector<float> out(rows * h);
  model::combine_routes(
      routing, h,
      [&](int64_t r, int64_t j) {
        return batches[routing.expert[r * k + j]].out.data() + row_of[r * k + j] * h;
      },
      nullptr, out.data());
  return out;
}

std::vector<float> random_rows(int64_t rows, int64_t h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(rows * h);
  for (auto& v : x) v = d(rng);
  return x;
}

class expert_parallel_test : public ::testing::TestWithParam<std::string> {};

void check_ops(const std::string& kind, int ranks, bool adversarial) {
  auto weights = supernode::testing::tiny_weights(model::precision::int8);
  const auto& c = weights->config;
  const int64_t layer = c.first_k_dense_replace, h = c.hidden_size;
  model::moe_weights w = weights->layers[layer].moe;
  if (adversarial) {
    // Every token picks experts 0..7, all hosted by rank 0: the worst case the buffers allow.
    w.correction_bias.assign(c.n_routed_experts, 0.0f);
    for (int e = 0; e < c.num_experts_per_tok; ++e) w.correction_bias[e] = 100.0f;
  }
  ep_options o;
  o.local_batch = 24;
  // Rows per rank and op: none, one, the full local batch, something in between.
  const std::vector<std::vector<int64_t>> rows_by_op = {{24, 0, 1, 7, 24, 3, 0, 24},
                                                        {1, 24, 0, 0, 5, 24, 24, 1},
                                                        {0, 0, 0, 0, 0, 0, 0, 0},
                                                        {24, 24, 24, 24, 24, 24, 24, 24}};
  run_group(kind, ranks, o, weights, [&](int r, expert_parallel& ep, transport::rank_fabric&) {
    for (size_t op = 0; op < rows_by_op.size(); ++op) {
      const int64_t rows = rows_by_op[op][r];
      const auto x = random_rows(rows, h, static_cast<uint32_t>(op * 100 + r));
      std::vector<float> out(rows * h, -1.0f);
      ep.forward(layer, w, x.data(), rows, out.data());
      const auto expected = local_moe(*weights, w, x, rows);
      ASSERT_EQ(out.size(), expected.size());
      if (!out.empty()) { // memcmp of two empty vectors' null data() is undefined
        ASSERT_EQ(0, std::memcmp(out.data(), expected.data(), out.size() * sizeof(float)))
            << "rank " << r << " op " << op;
      }
    }
  });
}

TEST_P(expert_parallel_test, ops_match_the_local_moe_bitwise_for_every_degree) {
  for (int ranks : {1, 2, 4, 8}) check_ops(GetParam(), ranks, false);
}

TEST_P(expert_parallel_test, all_tokens_to_one_rank_fit_and_match) {
  for (int ranks : {2, 8}) check_ops(GetParam(), ranks, true);
}

// Greedy generation of several sequences over `ranks` EP ranks (threads; rank 3 holds no
// sequence and only serves its peers) against one reference transformer holding them all.
struct model_run {
  std::vector<std::vector<int32_t>> got, expected;
  expert_parallel::rebalance_report first, last; // rank 0's EPLB reports
};

model_run run_model_over_ranks(const std::string& kind,
                               std::shared_ptr<const model::model_weights> weights, ep_options o,
                               int steps, bool microbatch) {
  const auto& c = weights->config;
  const int ranks = 4;
  const std::vector<std::vector<int64_t>> prompts = {{9, 3}, {14}, {1, 6, 11}, {}};
  const int64_t block = 16;
  struct seq {
    std::vector<int32_t> tokens;
    model::kv_block_table table;
  };
  using forward_fn =
      std::function<void(std::span<const int32_t>, std::span<const model::sequence_step>,
                         model::kv_block_pool&, std::vector<float>&)>;
  auto generate = [&](model::transformer& t, const forward_fn& forward, model::kv_block_pool& pool,
                      std::vector<seq>& seqs) {
    for (auto& s : seqs) s.table.reserve(pool, 64);
    for (int step = 0; step <= steps; ++step) {
      std::vector<int32_t> tokens;
      std::vector<model::sequence_step> st;
      for (auto& s : seqs) {
        const int64_t pos = s.table.tokens();
        const int64_t n = step == 0 ? static_cast<int64_t>(s.tokens.size()) : 1;
        for (int64_t i = 0; i < n; ++i) tokens.push_back(s.tokens[s.tokens.size() - n + i]);
        st.push_back({&s.table, pos, n,
                      step == 0 ? model::attention_mode::prefill : model::attention_mode::decode});
        s.table.set_tokens(pos + n);
      }
      std::vector<float> hidden, logits, picked;
      forward(tokens, st, pool, hidden);
      // Each sequence's last row picks its next token.
      int64_t row = 0;
      for (auto& s : st) {
        row += s.n_tokens;
        picked.insert(picked.end(), hidden.begin() + (row - 1) * c.hidden_size,
                      hidden.begin() + row * c.hidden_size);
      }
      t.logits(picked.data(), static_cast<int64_t>(st.size()), logits);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const float* l = logits.data() + i * c.vocab_size;
        seqs[i].tokens.push_back(static_cast<int32_t>(std::max_element(l, l + c.vocab_size) - l));
      }
    }
  };
  auto sequences_of = [&](const std::vector<int64_t>& salts) {
    std::vector<seq> seqs;
    for (auto salt : salts) seqs.push_back({supernode::testing::test_prompt(5 + salt, salt), {}});
    return seqs;
  };
  model_run result;
  {
    model::transformer ref(weights);
    model::kv_block_pool pool(ref.kv_layout(block, false), 64);
    std::vector<int64_t> all;
    for (auto& p : prompts) all.insert(all.end(), p.begin(), p.end());
    auto seqs = sequences_of(all);
    generate(
        ref, [&](auto t, auto s, auto& p, auto& h) { ref.forward(t, s, p, h); }, pool, seqs);
    for (auto& s : seqs) result.expected.push_back(s.tokens);
  }
  std::vector<std::vector<std::vector<int32_t>>> got(ranks);
  std::atomic<int> done{0};
  o.microbatches = microbatch ? 2 : 1;
  run_group(kind, ranks, o, weights, [&](int r, expert_parallel& ep, transport::rank_fabric&) {
    if (!prompts[r].empty()) {
      model::transformer t(weights);
      t.set_routed_experts(&ep);
      services::microbatch_pipeline pipeline(weights, ep);
      model::kv_block_pool pool(t.kv_layout(block, false), 64);
      auto seqs = sequences_of(prompts[r]);
      generate(
          t,
          [&](auto tokens, auto st, auto& p, auto& h) {
            if (microbatch)
              pipeline.forward(tokens, st, p, h);
            else
              t.forward(tokens, st, p, h);
          },
          pool, seqs);
      for (auto& s : seqs) got[r].push_back(s.tokens);
    }
    ++done;
    services::serve_peers_until(ep, done, ranks);
    if (r == 0) {
      result.first = ep.first_rebalance();
      result.last = ep.last_rebalance();
    }
  });
  for (auto& g : got)
    for (auto& s : g) result.got.push_back(s);
  return result;
}

TEST_P(expert_parallel_test, a_model_over_ep_ranks_gives_the_reference_tokens) {
  ep_options o;
  o.local_batch = 64;
  const auto run = run_model_over_ranks(
      GetParam(), supernode::testing::tiny_weights(model::precision::int8), o, 4, false);
  EXPECT_EQ(run.got, run.expected);
}

TEST_P(expert_parallel_test, microbatched_ranks_give_the_reference_tokens) {
  ep_options o;
  o.local_batch = 64;
  const auto run = run_model_over_ranks(
      GetParam(), supernode::testing::tiny_weights(model::precision::int8), o, 4, true);
  EXPECT_EQ(run.got, run.expected);
}

TEST_P(expert_parallel_test, eplb_on_a_skewed_gate_rebalances_mid_generation_and_changes_no_token) {
  // The skewed workload: the tiny model with its gate biased towards a few hot experts.
  auto skewed = std::make_shared<model::model_weights>(
      *supernode::testing::tiny_weights(model::precision::int8));
  services::skew_gate(*skewed, 1.2, 1.0f, 7);
  ep_options o;
  o.local_batch = 64;
  o.eplb_interval = 4;
  o.redundant_per_rank = 1;
  const auto run = run_model_over_ranks(GetParam(), skewed, o, 16, false);
  EXPECT_EQ(run.got, run.expected);
  EXPECT_GE(run.last.version, 2u) << "re-placements published";
  std::printf("EPLB on the skewed gate: max/mean host load %.3f (uniform) -> %.3f (first plan)\n",
              run.first.ratio_before, run.first.ratio_after);
  EXPECT_GT(run.first.ratio_before, 1.3) << "the gate was not skewed";
  EXPECT_LT(run.first.ratio_after, run.first.ratio_before);
}

TEST_P(expert_parallel_test, a_rank_that_leaves_breaks_the_group_without_a_hang) {
  auto weights = supernode::testing::tiny_weights(model::precision::int8);
  const auto& c = weights->config;
  const int64_t layer = c.first_k_dense_replace;
  std::string seen_error[2];
  ep_options o;
  o.local_batch = 8;
  run_group(GetParam(), 3, o, weights, [&](int r, expert_parallel& ep, transport::rank_fabric& f) {
    const auto x = random_rows(4, c.hidden_size, 5);
    std::vector<float> out(4 * c.hidden_size);
    if (r == 2) {
      f.leave();
      return;
    }
    try {
      ep.forward(layer, weights->layers[layer].moe, x.data(), 4, out.data());
      ADD_FAILURE() << "rank " << r << ": an op completed without rank 2";
    } catch (const services::ep_failure& e) {
      seen_error[r] = e.what();
    }
    EXPECT_THROW(ep.forward(layer, weights->layers[layer].moe, x.data(), 4, out.data()),
                 services::ep_failure);
  });
  // Whoever noticed first names the rank that left (rank 0 may see rank 1 leave after it).
  EXPECT_NE((seen_error[0] + seen_error[1]).find("rank 2 left"), std::string::npos)
      << seen_error[0] << " | " << seen_error[1];
}

INSTANTIATE_TEST_SUITE_P(fabrics, expert_parallel_test, ::testing::Values("shm", "zmq"));

TEST(local_group, an_unknown_fabric_is_refused_by_name_before_any_rank_runs) {
  services::local_group_options o;
  o.fabric = "rdma";
  o.ranks = 2;
  std::atomic<int> ran{0};
  try {
    services::run_local_group(o, supernode::testing::tiny_weights(model::precision::int8),
                              [&](int, expert_parallel&, transport::rank_fabric&) { ++ran; });
    ADD_FAILURE() << "an unknown fabric was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unknown fabric 'rdma'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ran, 0);
}

} // namespace
