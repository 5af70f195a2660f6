#pragma once
// Continuous batching with no threads or messages in it: the sequences a decode instance is
// generating, advanced one token each per step over the paged latent KV cache. Sequences join
// after their prefill (KV in their table, first token known) and leave when they finish or are
// cancelled, between steps; batch-invariant kernels keep every sequence's tokens independent of
// who else is in the batch.

#include "model/decode_step.hpp"
#include "model/kv_cache.hpp"
#include "model/mtp.hpp"
#include "model/transformer.hpp"
#include "services/decode/mtp_depth.hpp"
#include "services/protocol/serving_messages.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

namespace supernode::services {

struct decode_sequence {
  protocol::request_key key;
  protocol::request_spec spec;
  std::string prefill;         // the instance computing its prompt ("" for local prefill)
  model::kv_block_table table; // reserved for prompt + max_tokens
  std::vector<int32_t> generated;
  // Tokens the next step feeds: the last generated one, or, for a resumed request, every token
  // generated before the interruption (their KV is recomputed in that one step).
  std::vector<int32_t> feed;
  // The prompt's KV as it arrived (runs of whole blocks, referencing the frames they came in),
  // copied into `table` by the compute thread before the sequence joins: the actor thread that
  // received them never copies KV.
  std::vector<std::shared_ptr<const protocol::kv_transfer>> kv_runs;
  // Of `generated`, the leading tokens whose KV a resume loaded from the pool: the first step
  // feeds only the ones after them (decode_kv_mirror.hpp).
  int64_t loaded_generated = 0;
  // Context-cache blocks of prompt + generated known to be in the pool under decode keys (0:
  // none yet, the prompt's full blocks being the prefill's).
  int64_t mirrored_blocks = 0;
  // With MTP: the rows its next draft needs (from its prefill, or shipped with moved KV).
  model::mtp_state mtp;
};

// How many sequences a batch seats: the planner's cap (protocol::decode_batch_cap; 0 or less:
// none) within [decode] max_batch. Lowered below the running count, nobody leaves early: the
// running sequences finish and new ones wait until the batch is under the cap.
inline int64_t batch_seats(int64_t cap, int64_t max_batch) {
  return cap > 0 ? std::min(cap, max_batch) : max_batch;
}

class decode_batch {
public:
  // `release` returns a leaving sequence's KV blocks (the caller owns the pool's locking).
  using release_fn = std::function<void(decode_sequence&)>;
  decode_batch(model::transformer& model, model::kv_block_pool& pool, release_fn release);

  // Adds a prefilled sequence whose table holds the prompt's KV, with its first token. Returns
  // that token's update; a sequence that is already finished (EOS, max_tokens 1) does not stay.
  // A resumed sequence (spec.generated set) continues after its generated tokens instead: the
  // prefill's first token must be the first of them (anything else is a determinism bug, and
  // the request fails with serving_errc::internal rather than diverge from what its client
  // has), its update carries no token, and its next step computes the generated tokens' KV
  // with the decode arithmetic — several positions of one sequence in one forward, bitwise
  // equal to the one-token steps that first made them — before sampling the next token.
  protocol::token_update join(std::unique_ptr<decode_sequence> s, int32_t first_token);
  // Speculative decoding: up to `max_drafts` MTP drafts per sequence and step, adapted to
  // measured costs when `adaptive` (mtp_depth.hpp). The pool's layout must carry the MTP layer.
  void set_mtp(int64_t max_drafts, bool adaptive,
               model::draft_acceptance acceptance = model::draft_acceptance::reproducible);
  // One step for every running sequence: one token each, or with MTP the accepted drafts and
  // the token after them (a resumed sequence drafts from its second step); finished ones leave
  // the batch. When the forward
  // throws (an expert-parallel group broke), the batch is left as it was and the step can run
  // again, with the same result.
  std::vector<protocol::token_update> step();
  // Removes the running sequences `match` selects, ending each with `why` (cancelled when its
  // code is serving_errc::cancelled, an error otherwise).
  std::vector<protocol::token_update>
  remove_where(const std::function<bool(const protocol::request_key&)>& match,
               const protocol::error& why);
  // Takes out the running sequences whose KV covers every token but the last generated one
  // (all of them, except a resumed one whose first step has not run), keeping their KV: they
  // move to another instance. Nothing is released.
  std::vector<std::unique_ptr<decode_sequence>> detach_movable();
  // Ends every sequence (instance shutting down or failing) with `why`.
  std::vector<protocol::token_update> fail_all(const protocol::error& why);

  // Replaces model.forward for the step (microbatch pipelining runs it on two threads).
  using forward_fn =
      std::function<void(std::span<const int32_t>, std::span<const model::sequence_step>,
                         model::kv_block_pool&, std::vector<float>&)>;
  void set_forward(forward_fn f) { stepper_.set_forward(std::move(f)); }
  void set_draft_vocabulary(int64_t n, const std::filesystem::path& ranked_file) {
    stepper_.set_draft_vocabulary(n, ranked_file);
  }
  // Runs for each sequence after a step wrote its KV (its table counts the new positions),
  // before it samples and maybe leaves: [ems] store_decode_kv = "incremental" stores there.
  using written_fn = std::function<void(decode_sequence&)>;
  void set_after_forward(written_fn f) { after_forward_ = std::move(f); }

  // At most this many rows (tokens fed, drafts included) in one step's forward; 0: no limit.
  // An expert-parallel group's buffers hold so many tokens an op: every sequence takes its
  // token (and drafts) first, and a resumed sequence's catch-up takes what is left, the rest
  // of it in the next steps (same KV bits: a position's arithmetic does not depend on the
  // forward it is in).
  void set_row_budget(int64_t rows) { row_budget_ = rows; }

  size_t size() const { return running_.size(); }
  // Since start: MTP tokens drafted and accepted, the sequence-steps that drafted, and the
  // depth of the last step.
  int64_t drafted_tokens() const { return drafted_; }
  int64_t accepted_tokens() const { return accepted_; }
  int64_t drafting_steps() const { return drafting_steps_; }
  int64_t last_depth() const { return last_depth_; }
  bool empty() const { return running_.empty(); }

private:
  // Appends `token` and, when the sequence ends there, says why in the update.
  bool accept(decode_sequence& s, int32_t token, protocol::token_update& update) const;
  protocol::token_update resume(std::unique_ptr<decode_sequence> s, int32_t first_token);
  void leave(size_t index);

  model::transformer& model_;
  model::kv_block_pool& pool_;
  release_fn release_;
  written_fn after_forward_;
  std::vector<std::unique_ptr<decode_sequence>> running_;
  model::decode_stepper stepper_;
  std::unique_ptr<mtp_depth_policy> depth_; // set by set_mtp
  model::draft_acceptance acceptance_ = model::draft_acceptance::reproducible;
  std::vector<model::decode_sequence_step> steps_;
  std::vector<model::decode_sequence_outcome> outcomes_;
  int64_t drafted_ = 0, accepted_ = 0, drafting_steps_ = 0, last_depth_ = 0;
  int64_t row_budget_ = 0;
  std::vector<size_t> fed_; // per running sequence, the tokens of its feed this step takes
};

} // namespace supernode::services
