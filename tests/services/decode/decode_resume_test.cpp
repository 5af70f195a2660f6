// Resuming a request in a decode batch, as a decode instance does when a request's first
// instance died: the prompt is prefilled again and the tokens its client already has are run
// through the decode arithmetic in one multi-position step. The continuation must equal the
// uninterrupted run's tokens, and the KV left in the table must equal the uninterrupted run's
// bit for bit — which recomputing the generated span with a prefill would not give (checked
// too, so the comparison can fail). Resume points: the first generated token, a block
// boundary, mid-block and the last token; greedy and seeded sampling. With the generated KV
// mirrored into a pool block by block ([ems] store_decode_kv = "incremental"), a resume loads
// the blocks it finds and feeds only the tokens after them, with the same tokens and KV.

#include "../../support/serving_reference.hpp"
#include "services/decode/decode_batch.hpp"
#include "services/decode/decode_kv_mirror.hpp"
#include "services/ems/context_cache_memory_pool.hpp"
#include "services/ems/prefix_keys.hpp"

#include <algorithm>
#include <gtest/gtest.h>

using namespace supernode;
using namespace supernode::services;
using protocol::request_spec;

namespace {

constexpr int64_t block_size = 16;

struct outcome {
  std::vector<int32_t> tokens;      // as the updates carried them
  std::vector<int64_t> first_index; // of each update with tokens
  protocol::finish_reason finish = protocol::finish_reason::none;
  protocol::error failure;
  std::vector<std::byte> kv; // the table's blocks as it left the batch
  int64_t loaded_blocks = 0; // decode-made blocks a resume loaded from the pool
};

// Prefills `spec.prompt` (the prefill instance's arithmetic), joins the sequence and steps
// the batch until it leaves, keeping the KV it had when it left. With `mirror`, every block
// the decode arithmetic fills goes to its pool after the step that filled it, and a resumed
// sequence loads what the pool has first (as a decode instance does).
// With `mtp_drafts`, the batch drafts that many tokens every step (not adaptive), the prefill
// writes the MTP KV and hands the sequence its MTP state.
// With `row_budget`, a step's forward takes at most that many rows (decode_batch's budget).
outcome run(const request_spec& spec, ems::context_cache_client* mirror = nullptr,
            int64_t mtp_drafts = 0, int64_t row_budget = 0) {
  model::transformer m(supernode::testing::tiny_weights(model::precision::int8));
  const auto layout = m.kv_layout(block_size, mtp_drafts > 0);
  const auto prompt = static_cast<int64_t>(spec.prompt.size());
  model::kv_block_pool pool(layout, layout.blocks_for(prompt + spec.max_tokens));
  outcome out;
  decode_batch batch(m, pool, [&](decode_sequence& s) {
    out.kv.resize(s.table.blocks().size() * layout.block_bytes());
    for (size_t i = 0; i < s.table.blocks().size(); ++i)
      pool.export_block_bytes(
          s.table.blocks()[i],
          std::span(out.kv).subspan(i * layout.block_bytes(), layout.block_bytes()));
    s.table.release(pool);
  });
  if (mirror)
    batch.set_after_forward([&](decode_sequence& s) { mirror_full_blocks(s, *mirror, pool); });
  batch.set_mtp(mtp_drafts, false);
  batch.set_row_budget(row_budget);
  auto seq = std::make_unique<decode_sequence>();
  seq->key = {"gateway-0", 1};
  seq->spec = spec;
  seq->table.reserve(pool, prompt + spec.max_tokens);
  prefill_engine prefill(m, 2048, mtp_drafts > 0);
  prefill_job job;
  job.key = seq->key;
  job.spec = spec;
  job.table = &seq->table;
  std::vector<prefill_job*> jobs{&job};
  int32_t first = -1;
  while (job.remaining() > 0)
    for (auto& done : prefill.step(jobs, pool)) {
      first = done.first_token;
      seq->mtp = std::move(done.mtp);
    }
  auto take = [&](const protocol::token_update& u) {
    if (!u.tokens.empty()) out.first_index.push_back(u.first_index);
    out.tokens.insert(out.tokens.end(), u.tokens.begin(), u.tokens.end());
    if (u.finish != protocol::finish_reason::none) {
      out.finish = u.finish;
      out.failure = u.failure;
    }
  };
  if (mirror && !spec.generated.empty()) out.loaded_blocks = load_mirrored_kv(*seq, *mirror, pool);
  take(batch.join(std::move(seq), first));
  while (!batch.empty())
    for (auto& u : batch.step()) take(u);
  return out;
}

request_spec long_prompt(float temperature) {
  request_spec s;
  s.prompt = supernode::testing::test_prompt(150, 21); // 9 full blocks and 6 tokens
  s.max_tokens = 40;
  s.stop_at_eos = false; // every resume point below exists
  s.temperature = temperature;
  s.top_p = temperature > 0 ? 0.9f : 1.0f;
  s.seed = 1234;
  return s;
}

// The uninterrupted run's tokens, and what a resume after `k` of them gives. A resume is
// exact when its continuation and KV equal the uninterrupted run's.
void expect_continues(const outcome& whole, const outcome& resumed, int64_t k) {
  EXPECT_TRUE(resumed.failure.ok()) << resumed.failure;
  EXPECT_EQ(resumed.finish, whole.finish) << "resumed after " << k;
  ASSERT_FALSE(resumed.first_index.empty());
  EXPECT_EQ(resumed.first_index.front(), k) << "the continuation starts where the client is";
  std::vector<int32_t> joined(whole.tokens.begin(), whole.tokens.begin() + k);
  joined.insert(joined.end(), resumed.tokens.begin(), resumed.tokens.end());
  EXPECT_EQ(joined, whole.tokens) << "resumed after " << k;
  EXPECT_TRUE(resumed.kv == whole.kv) << "KV after resuming at " << k << " differs";
}

request_spec resumed_after(const request_spec& spec, const outcome& whole, int64_t k) {
  auto resumed = spec;
  resumed.generated.assign(whole.tokens.begin(), whole.tokens.begin() + k);
  return resumed;
}

void expect_resumes_exactly(const request_spec& spec) {
  const auto whole = run(spec);
  ASSERT_EQ(whole.tokens, supernode::testing::reference_generation(spec).tokens);
  ASSERT_EQ(whole.tokens.size(), static_cast<size_t>(spec.max_tokens));
  const auto prompt = static_cast<int64_t>(spec.prompt.size());
  // 1: right after the first token; 10: prompt + 10 = 160, a block boundary; 17: mid-block.
  for (int64_t k : {int64_t{1}, int64_t{10}, int64_t{17}, int64_t{spec.max_tokens - 1}}) {
    ASSERT_EQ(k == 10, (prompt + k) % block_size == 0);
    expect_continues(whole, run(resumed_after(spec, whole, k)), k);
  }
}

// A pool in memory and the context cache over it, with 16-token blocks.
struct mirror_pool {
  static constexpr const char* model_key = "tiny@test";
  ems::context_cache_memory_pool pool;
  ems::context_cache_client cache{pool, config(), model_key, layout()};

  static ems::ems_config config() {
    ems::ems_config c;
    c.block_tokens = block_size;
    return c;
  }
  static model::kv_block_layout layout() {
    return model::transformer(supernode::testing::tiny_weights(model::precision::int8))
        .kv_layout(block_size, false);
  }
  int64_t hit_tokens() const { return static_cast<int64_t>(cache.stats().hit_tokens); }
};

// Blocks of the tokens with KV (the prompt and all generated tokens but the last, the first
// `k` of them) wholly past the prompt's full blocks: what a resume after k can load.
int64_t loadable_blocks(int64_t prompt, int64_t k) {
  return (prompt + k - 1) / block_size - prompt / block_size;
}

void expect_resumes_from_the_pool(const request_spec& spec) {
  mirror_pool mirrored;
  const auto whole = run(spec, &mirrored.cache);
  // Mirroring changes nothing the run computes.
  ASSERT_EQ(whole.tokens, supernode::testing::reference_generation(spec).tokens);
  ASSERT_TRUE(whole.kv == run(spec).kv);
  const auto prompt = static_cast<int64_t>(spec.prompt.size());
  // The block holding the prompt's end and each one after it, once full: 150 + 39 tokens with
  // KV fill blocks 9 and 10.
  ASSERT_EQ(mirrored.pool.list("context").size(),
            static_cast<size_t>(loadable_blocks(prompt, spec.max_tokens)));
  // 10: prompt + generated end on a block boundary, but the last token has no KV, so that
  // block is not full (all 10 are fed); 11: the tokens with KV end on the boundary (only the
  // last one is fed); 17: mid-block; 39: the last.
  for (int64_t k : {int64_t{10}, int64_t{11}, int64_t{17}, int64_t{spec.max_tokens - 1}}) {
    const int64_t before = mirrored.hit_tokens();
    const auto resumed = run(resumed_after(spec, whole, k), &mirrored.cache);
    const int64_t want = loadable_blocks(prompt, k);
    EXPECT_EQ(resumed.loaded_blocks, want) << "resumed after " << k;
    EXPECT_EQ(mirrored.hit_tokens() - before, want * block_size) << "resumed after " << k;
    expect_continues(whole, resumed, k);
  }
  // An empty pool: nothing loaded, every generated token fed, the same result.
  mirror_pool empty;
  const auto cold = run(resumed_after(spec, whole, 17), &empty.cache);
  EXPECT_EQ(cold.loaded_blocks, 0);
  expect_continues(whole, cold, 17);
}

} // namespace

TEST(decode_resume, with_mtp_drafts_the_continuation_equals_the_run_without) {
  // Drafting from the prefill's MTP state, the resumed sequence feeds its generated span in one
  // step, then drafts from the rows that step gave: its tokens are those of the uninterrupted
  // run without drafts (KV is compared without MTP above: drafts write the MTP layer's slots).
  const auto spec = long_prompt(0.0f);
  const auto whole = run(spec);
  ASSERT_EQ(run(spec, nullptr, 2).tokens, whole.tokens);
  for (int64_t k : {int64_t{1}, int64_t{10}, int64_t{17}, int64_t{spec.max_tokens - 1}}) {
    const auto resumed = run(resumed_after(spec, whole, k), nullptr, 2);
    std::vector<int32_t> joined(whole.tokens.begin(), whole.tokens.begin() + k);
    joined.insert(joined.end(), resumed.tokens.begin(), resumed.tokens.end());
    EXPECT_EQ(joined, whole.tokens) << "resumed after " << k;
  }
}

TEST(decode_resume, a_catch_up_beyond_the_row_budget_takes_several_steps_and_changes_nothing) {
  // An expert-parallel group's buffers hold so many tokens an op: a resumed sequence's
  // generated span longer than that is fed over several steps, with the same tokens and KV.
  const auto spec = long_prompt(0.0f);
  const auto whole = run(spec);
  for (int64_t k : {int64_t{10}, int64_t{17}, int64_t{spec.max_tokens - 1}})
    expect_continues(whole, run(resumed_after(spec, whole, k), nullptr, 0, /*row_budget=*/4), k);
  // With MTP: a step of one token and its two drafts fits the budget of three.
  for (int64_t k : {int64_t{10}, int64_t{17}}) {
    const auto resumed = run(resumed_after(spec, whole, k), nullptr, 2, /*row_budget=*/3);
    std::vector<int32_t> joined(whole.tokens.begin(), whole.tokens.begin() + k);
    joined.insert(joined.end(), resumed.tokens.begin(), resumed.tokens.end());
    EXPECT_EQ(joined, whole.tokens) << "resumed after " << k << " with drafts";
  }
}

TEST(decode_resume, greedy_continuation_and_kv_equal_the_uninterrupted_run) {
  expect_resumes_exactly(long_prompt(0.0f));
}

TEST(decode_resume, seeded_sampling_continues_with_the_same_draws) {
  expect_resumes_exactly(long_prompt(0.9f));
}

TEST(decode_resume, recomputing_the_generated_span_by_prefill_gives_other_kv) {
  // What resuming must not do: prefill prompt + generated. Its KV differs from the decode
  // arithmetic's, so the exact comparison above can tell the two apart.
  const auto spec = long_prompt(0.0f);
  const auto whole = run(spec);
  auto as_prompt = spec;
  as_prompt.prompt.insert(as_prompt.prompt.end(), whole.tokens.begin(), whole.tokens.end() - 1);
  as_prompt.max_tokens = 1;
  const auto prefilled = run(as_prompt);
  ASSERT_EQ(prefilled.kv.size(), whole.kv.size());
  EXPECT_FALSE(prefilled.kv == whole.kv);
}

TEST(decode_resume, a_first_token_that_differs_from_the_clients_fails_the_request) {
  auto spec = long_prompt(0.0f);
  const auto whole = run(spec);
  spec.generated = {whole.tokens[0] + 1, whole.tokens[1]};
  const auto resumed = run(spec);
  EXPECT_TRUE(resumed.tokens.empty());
  EXPECT_EQ(resumed.finish, protocol::finish_reason::error);
  EXPECT_TRUE(resumed.failure.is(protocol::serving_errc::internal)) << resumed.failure;
}

TEST(decode_resume, a_request_whose_generation_was_complete_ends_without_new_tokens) {
  auto spec = long_prompt(0.0f);
  const auto whole = run(spec);
  spec.generated = whole.tokens; // all max_tokens of them
  const auto resumed = run(spec);
  EXPECT_TRUE(resumed.tokens.empty());
  EXPECT_EQ(resumed.finish, protocol::finish_reason::length);
  EXPECT_TRUE(resumed.failure.ok());
}

TEST(decode_resume, greedy_resume_loads_the_mirrored_blocks_with_the_same_tokens_and_kv) {
  expect_resumes_from_the_pool(long_prompt(0.0f));
}

TEST(decode_resume, seeded_resume_loads_the_mirrored_blocks_with_the_same_draws) {
  expect_resumes_from_the_pool(long_prompt(0.9f));
}

TEST(decode_resume, mirrored_decode_kv_never_has_a_prompt_prefixs_key) {
  // Prefill KV and decode KV of the same tokens differ in their last bits: a prefill looking up
  // a follow-up prompt (this prompt and its answer) must not load the blocks decode stored.
  mirror_pool mirrored;
  const auto spec = long_prompt(0.0f);
  const auto whole = run(spec, &mirrored.cache);
  auto follow_up = spec.prompt;
  follow_up.insert(follow_up.end(), whole.tokens.begin(), whole.tokens.end());
  const auto stored = mirrored.pool.list("context");
  ASSERT_FALSE(stored.empty());
  for (auto key : ems::prefix_block_keys(mirror_pool::model_key, follow_up, block_size))
    EXPECT_EQ(std::count(stored.begin(), stored.end(), ems::context_block_name(key)), 0);
  // And another prompt length is another salt: the same tokens split elsewhere share nothing.
  std::vector<int32_t> tokens = follow_up;
  tokens.pop_back();
  const auto a = ems::prefix_block_keys(ems::decode_kv_model_key(mirror_pool::model_key, 150),
                                        tokens, block_size);
  const auto b = ems::prefix_block_keys(ems::decode_kv_model_key(mirror_pool::model_key, 151),
                                        tokens, block_size);
  EXPECT_NE(a.back(), b.back());
}
