// The serving engines without threads or messages: packed and chunked prefill, KV shipped as
// whole blocks from one pool to another, and continuous batching with sequences joining and
// leaving mid-flight must give the reference engine's tokens exactly.

#include "../../support/serving_reference.hpp"
#include "model/engine.hpp"
#include "services/decode/decode_batch.hpp"
#include "services/prefill/prefill_engine.hpp"

#include <deque>
#include <gtest/gtest.h>
#include <map>
#include <memory>

using namespace supernode;
using services::decode_batch;
using services::decode_sequence;
using services::prefill_engine;
using services::prefill_job;
using services::protocol::request_key;
using services::protocol::request_spec;

namespace {

std::vector<request_spec> workload() {
  std::vector<request_spec> specs;
  const int64_t lengths[] = {5, 40, 17, 70, 1, 33};
  for (int64_t i = 0; i < 6; ++i) {
    request_spec s;
    s.prompt = supernode::testing::test_prompt(lengths[i], i);
    s.max_tokens = 3 + static_cast<int32_t>(i) * 2;
    if (i == 2) { // sampled, reproducible from its seed
      s.temperature = 0.8f;
      s.top_k = 50;
      s.seed = 7;
    }
    s.stop_at_eos = i != 3;
    specs.push_back(s);
  }
  return specs;
}

model::generation_result reference(const request_spec& s) {
  return supernode::testing::reference_generation(s);
}

// Prefill with a small budget (so prompts are packed together and long ones chunked), decode
// steps interleaved so sequences join a running batch; with `ship`, the KV moves between two
// pools block by block as the prefill instance sends it.
void run_disaggregated(bool ship) {
  auto weights = supernode::testing::tiny_weights(model::precision::int8);
  model::transformer prefill_model(weights), decode_model(weights);
  const auto layout = prefill_model.kv_layout(16, false);
  model::kv_block_pool prefill_pool(layout, 64), decode_pool(layout, 64);
  auto& prefill_side = ship ? prefill_pool : decode_pool;
  prefill_engine prefill(ship ? prefill_model : decode_model, 32);

  std::map<request_key, std::vector<int32_t>> tokens;
  std::map<request_key, std::string> finish;
  decode_batch batch(decode_model, decode_pool,
                     [&](decode_sequence& s) { s.table.release(decode_pool); });
  auto record = [&](const services::protocol::token_update& u) {
    auto& t = tokens[u.key];
    t.insert(t.end(), u.tokens.begin(), u.tokens.end());
    if (u.finish != services::protocol::finish_reason::none)
      finish[u.key] = services::protocol::to_string(u.finish);
  };

  const auto specs = workload();
  std::deque<std::unique_ptr<decode_sequence>> seqs;
  std::deque<std::unique_ptr<model::kv_block_table>> prefill_tables;
  std::vector<prefill_job> jobs(specs.size());
  std::vector<prefill_job*> queue;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto seq = std::make_unique<decode_sequence>();
    seq->key = {"gateway-0", i + 1};
    seq->spec = specs[i];
    seq->table.reserve(decode_pool,
                       static_cast<int64_t>(specs[i].prompt.size()) + specs[i].max_tokens);
    jobs[i].key = seq->key;
    jobs[i].spec = specs[i];
    if (ship) {
      prefill_tables.push_back(std::make_unique<model::kv_block_table>());
      prefill_tables.back()->reserve(prefill_pool, static_cast<int64_t>(specs[i].prompt.size()));
      jobs[i].table = prefill_tables.back().get();
    } else {
      jobs[i].table = &seq->table;
    }
    queue.push_back(&jobs[i]);
    seqs.push_back(std::move(seq));
  }

  std::vector<float> block(layout.block_floats());
  while (!queue.empty() || !batch.empty()) {
    if (!queue.empty()) {
      for (auto& done : prefill.step(queue, prefill_side)) {
        const size_t i = static_cast<size_t>(done.job->key.id - 1);
        auto& seq = seqs[i];
        if (ship) { // whole blocks, as kv_transfer carries them
          const auto& from = done.job->table->blocks();
          for (size_t b = 0; b < from.size(); ++b) {
            prefill_pool.export_block(from[b], block);
            decode_pool.import_block_bytes(seq->table.blocks()[b], std::as_bytes(std::span(block)));
          }
          done.job->table->release(prefill_pool);
        }
        record(batch.join(std::move(seq), done.first_token));
        std::erase(queue, done.job);
      }
    }
    for (auto& u : batch.step()) record(u);
  }

  for (size_t i = 0; i < specs.size(); ++i) {
    const auto want = reference(specs[i]);
    const request_key key{"gateway-0", i + 1};
    EXPECT_EQ(tokens[key], want.tokens) << "request " << i;
    EXPECT_EQ(finish[key], want.finish_reason) << "request " << i;
  }
  EXPECT_EQ(decode_pool.free_blocks(), decode_pool.num_blocks());
  EXPECT_EQ(prefill_pool.free_blocks(), prefill_pool.num_blocks());
}

} // namespace

TEST(pack_prefill, packs_in_order_and_chunks_what_exceeds_the_budget) {
  std::vector<prefill_job> jobs(3);
  jobs[0].spec.prompt.resize(10);
  jobs[1].spec.prompt.resize(50);
  jobs[1].done = 5;
  jobs[2].spec.prompt.resize(4);
  std::vector<prefill_job*> ptrs{&jobs[0], &jobs[1], &jobs[2]};
  auto chunks = services::pack_prefill(ptrs, 32);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].job, 0u);
  EXPECT_EQ(chunks[0].n_tokens, 10);
  EXPECT_EQ(chunks[1].job, 1u);
  EXPECT_EQ(chunks[1].first_pos, 5);
  EXPECT_EQ(chunks[1].n_tokens, 22);
  EXPECT_EQ(services::pack_prefill(ptrs, 100).size(), 3u);
}

TEST(serving_engines, disaggregated_prefill_and_continuous_batching_match_the_reference) {
  run_disaggregated(true);
}

TEST(serving_engines, colocated_prefill_and_continuous_batching_match_the_reference) {
  run_disaggregated(false);
}

TEST(serving_engines, a_sequence_finished_by_its_first_token_never_joins) {
  auto weights = supernode::testing::tiny_weights(model::precision::int8);
  model::transformer m(weights);
  model::kv_block_pool pool(m.kv_layout(16, false), 8);
  int released = 0;
  decode_batch batch(m, pool, [&](decode_sequence& s) {
    s.table.release(pool);
    ++released;
  });
  auto seq = std::make_unique<decode_sequence>();
  seq->key = {"g", 1};
  seq->spec.prompt = {1, 2, 3};
  seq->spec.max_tokens = 1;
  seq->table.reserve(pool, 4);
  auto u = batch.join(std::move(seq), 42);
  EXPECT_EQ(u.tokens, std::vector<int32_t>{42});
  EXPECT_EQ(u.finish, services::protocol::finish_reason::length);
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(released, 1);
  EXPECT_EQ(pool.free_blocks(), 8);
}
