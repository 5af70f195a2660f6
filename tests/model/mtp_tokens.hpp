#pragma once
// Decoding with MTP drafts at every depth, one request at a time and batched, against decoding
// without: greedy requests, and seeded sampled ones under the reproducible acceptance rule: the
// check mtp_test runs on the tiny model and mtp_demo_test on the demo one.

#include "model/engine.hpp"
#include "tiny_model.hpp"

#include <gtest/gtest.h>

namespace supernode::testing {

using namespace supernode::model;

inline namespace mtp_tokens {

// Prompts of a few lengths, with max_tokens from 1 up, so drafting runs hit max_tokens mid-run.
inline std::vector<generation_request> requests(int64_t n, int64_t salt) {
  std::vector<generation_request> out;
  for (int64_t i = 0; i < n; ++i) {
    generation_request r;
    r.prompt = test_prompt(3 + (i * 11) % 40, salt + i);
    r.max_tokens = static_cast<int32_t>(1 + (i * 5) % 23);
    r.stop_at_eos = i % 2 == 0;
    if (i % 3 == 1) r.sampling = {0.8f, 0.95f, 0, static_cast<uint64_t>(40 + i)}; // seeded
    out.push_back(std::move(r));
  }
  return out;
}

inline std::vector<generation_result> run(std::shared_ptr<const model_weights> w, int64_t drafts,
                                          const std::vector<generation_request>& rs, bool batched,
                                          int64_t draft_vocab = 0) {
  engine_options o;
  o.mtp_drafts = drafts;
  o.mtp_draft_vocab = draft_vocab;
  o.max_context = 512;
  o.kv_blocks = 256;
  reference_engine e(std::move(w), o);
  if (batched) return e.generate_batch(rs);
  std::vector<generation_result> out;
  for (auto& r : rs) out.push_back(e.generate(r));
  return out;
}

// `draft_vocab` > 0: drafts propose only that many tokens (model/draft_vocab.hpp).
inline void expect_same_tokens_at_every_depth(std::shared_ptr<const model_weights> w,
                                              int64_t* accepted_at_1, int64_t draft_vocab = 0) {
  const auto rs = requests(8, 5);
  const auto want = run(w, 0, rs, false);
  for (int64_t drafts : {1, 2, 3})
    for (bool batched : {false, true}) {
      const auto got = run(w, drafts, rs, batched, draft_vocab);
      int64_t drafted = 0, accepted = 0;
      for (size_t i = 0; i < rs.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens)
            << "request " << i << ", " << drafts << " drafts" << (batched ? ", batched" : "")
            << (draft_vocab > 0 ? ", draft vocabulary " + std::to_string(draft_vocab) : "");
        EXPECT_EQ(got[i].finish_reason, want[i].finish_reason) << "request " << i;
        EXPECT_LE(got[i].accepted_tokens, got[i].drafted_tokens);
        drafted += got[i].drafted_tokens;
        accepted += got[i].accepted_tokens;
      }
      EXPECT_GT(drafted, 0) << drafts << " drafts";
      if (drafts == 1 && !batched && accepted_at_1) *accepted_at_1 = accepted;
    }
}

} // namespace mtp_tokens

} // namespace supernode::testing
