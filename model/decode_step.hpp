#pragma once
// One decode step over a batch of sequences: the loop the reference engine and every decode
// instance run, so they yield the same tokens. Each sequence feeds the tokens whose KV it
// lacks (its latest token; a resumed sequence every token since its KV ends). With MTP, a
// sequence first drafts up to `max_drafts` tokens with the MTP module (recursively past the
// first), the main model verifies them in the same forward — each drafted position computed
// with the decode arithmetic, bitwise what a one-token step would compute — and the accepted
// run plus the token sampled after it are emitted. KV written for rejected drafts is rolled
// back: the table stops counting it, and the next step overwrites it before anything reads it.

#include "kernels/sampling.hpp"
#include "model/draft_vocab.hpp"
#include "model/kv_cache.hpp"
#include "model/mtp.hpp"
#include "model/transformer.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace supernode::model {

// How a sampled sequence's drafts are accepted (greedy ones: exactly when they are the
// argmax, either way). `reproducible`: a draft is accepted when it equals the token sample()
// draws at its index, so seeded sampling gives the tokens of decoding without drafts at any
// depth, batch or resume point. `standard`: the min(1, p/q) rule, which accepts more
// drafts and keeps each token's distribution, not its draws.
enum class draft_acceptance : uint8_t { reproducible, standard };

struct decode_sequence_step {
  kv_block_table* table = nullptr; // tokens(): the position of feed[0]
  std::span<const int32_t> feed;   // not empty
  mtp_state* mtp = nullptr;        // nullptr: this sequence never drafts
  // At most this many drafts this step; the caller caps it by the tokens the sequence may still
  // emit, less one (the token after the drafts). Drafts need a one-token feed.
  int64_t max_drafts = 0;
  kernels::sampling_params sampling;
  uint64_t next_index = 0; // index among the generated tokens of the first token this yields
  draft_acceptance acceptance = draft_acceptance::reproducible;
};

struct decode_sequence_outcome {
  std::vector<int32_t> tokens; // the accepted drafts, then the token sampled after them
  int64_t drafted = 0;
  int64_t accepted() const { return static_cast<int64_t>(tokens.size()) - 1; }
};

class decode_stepper {
public:
  using forward_fn = std::function<void(std::span<const int32_t>, std::span<const sequence_step>,
                                        kv_block_pool&, std::vector<float>&)>;
  explicit decode_stepper(transformer& model) : model_(model) {}
  // Replaces model.forward for the main model (microbatch pipelining runs it on two threads);
  // the MTP module runs on `model`, its experts on this rank.
  void set_forward(forward_fn f) { forward_ = std::move(f); }
  // Drafts propose only `n` tokens (model/draft_vocab.hpp: ranked by `ranked_file`, or the
  // lowest ids), through a head of their rows; 0: the whole vocabulary. Verification always
  // uses the full head.
  void set_draft_vocabulary(int64_t n, const std::filesystem::path& ranked_file);

  // Runs one step; every table must have room for its feed and drafts. On return each table
  // counts its fed tokens and accepted drafts and each MTP state holds the rows to compute
  // next. When the forward throws, tables and states are as before and the step can run again
  // with the same result (the KV it wrote is rewritten identically).
  void step(std::span<decode_sequence_step> sequences, kv_block_pool& pool,
            std::vector<decode_sequence_outcome>& out);

private:
  // Fills drafts_/draft_probabilities_ for the sequences that draft; writes MTP KV only.
  void draft(std::span<decode_sequence_step> sequences, kv_block_pool& pool);
  void commit(decode_sequence_step& s, const float* step_hidden, decode_sequence_outcome& out,
              bool rows_computed);
  static constexpr int64_t catch_up_rows = 8;

  transformer& model_;
  forward_fn forward_;
  // Per sequence of the step.
  std::vector<std::vector<int32_t>> drafts_;
  std::vector<std::vector<float>> draft_probabilities_; // [drafts][vocab], sampled ones only
  std::vector<int64_t> first_row_;                      // its first row in hidden_
  // Scratch.
  std::vector<int32_t> tokens_;
  std::vector<sequence_step> steps_;
  std::vector<float> hidden_, rows_, logits_, mtp_in_, mtp_hidden_, mtp_logits_, draft_q_;
  std::unique_ptr<draft_head> draft_head_;
  std::vector<size_t> drafting_;
  std::vector<bool> computed_; // per sequence: the draft phase computed its MTP rows
};

} // namespace supernode::model
