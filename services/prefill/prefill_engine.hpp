#pragma once
// Prefill compute with no threads or messages in it, shared by prefill instances and by a
// decode instance that prefills for itself (colocated). Several prompts are packed into one
// forward step up to a token budget (sequence packing); a prompt longer than the budget is
// chunked over consecutive steps, which gives the same KV and logits bit for bit because every
// kernel is batch-invariant and prefill attends over the cached prefix.

#include "model/kv_cache.hpp"
#include "model/mtp.hpp"
#include "model/transformer.hpp"
#include "services/protocol/serving_messages.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace supernode::services {

struct prefill_job {
  protocol::request_key key;
  protocol::request_spec spec;
  model::kv_block_table* table = nullptr; // has room for the whole prompt
  int64_t done = 0;                       // prompt tokens already in the cache
  int64_t remaining() const { return static_cast<int64_t>(spec.prompt.size()) - done; }
};

struct prefill_chunk {
  size_t job = 0; // index into the jobs given to pack_prefill
  int64_t first_pos = 0;
  int64_t n_tokens = 0;
};

// Jobs in order, each taking as many of its remaining tokens as the budget has left.
std::vector<prefill_chunk> pack_prefill(std::span<prefill_job* const> jobs, int64_t token_budget);

struct prefill_output {
  prefill_job* job = nullptr;
  int32_t first_token = 0;
  // With MTP: the row its first decode step computes before drafting (model/mtp.hpp).
  model::mtp_state mtp;
};

class prefill_engine {
public:
  // With `with_mtp` (the pool's layout has the MTP layer), every step also writes the MTP KV
  // of the prompt positions it ran, and a completed prompt's output carries its MTP state.
  prefill_engine(model::transformer& model, int64_t token_budget, bool with_mtp = false);

  // Runs one packed step over the front of `jobs`, advancing their `done`; returns the jobs
  // whose prompt is now complete, with their first token sampled as the reference engine does.
  std::vector<prefill_output> step(std::span<prefill_job* const> jobs, model::kv_block_pool& pool);
  int64_t token_budget() const { return budget_; }

private:
  model::transformer& model_;
  int64_t budget_;
  bool with_mtp_;
  std::vector<int32_t> tokens_;
  std::vector<model::sequence_step> steps_;
  std::vector<float> hidden_, last_rows_, logits_;
};

} // namespace supernode::services
