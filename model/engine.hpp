#pragma once
// The single-process reference engine: prefill then decode on one transformer with a paged
// latent KV cache. Every deployment shape of Supernode must reproduce its greedy tokens.

#include "kernels/sampling.hpp"
#include "model/decode_step.hpp"
#include "model/kv_cache.hpp"
#include "model/transformer.hpp"
#include "model/weights.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace supernode::model {

struct generation_request {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 16;
  kernels::sampling_params sampling; // temperature 0: greedy
  bool stop_at_eos = true;
};

struct generation_result {
  std::vector<int32_t> tokens;
  std::string finish_reason; // "stop" (EOS) or "length"
  double prefill_ms = 0.0;
  double decode_ms_per_token = 0.0; // decode time over the tokens decoded after the first
  // Speculative decoding (engine_options::mtp_drafts): tokens the MTP module drafted for this
  // request and how many of them the main model accepted.
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
};

// Why a sequence ends after `token`, its `generated`-th token (1-based): "stop" for EOS when
// the request stops there, "length" at max_tokens, nullptr to go on. One rule for the reference
// engine and every serving engine, so they end sequences on the same token.
const char* finish_reason_after(int32_t token, int64_t generated, int32_t max_tokens,
                                bool stop_at_eos, int64_t eos_token_id);

struct engine_options {
  int64_t block_size = 16;
  int64_t kv_blocks = 0; // 0: enough for max_context tokens
  int64_t max_context = 4096;
  // MTP drafts per decode step (0: none); needs weights loaded with their MTP module.
  int64_t mtp_drafts = 0;
  // How sampled requests accept drafts (decode_step.hpp): reproducible keeps seeded draws.
  draft_acceptance mtp_acceptance = draft_acceptance::reproducible;
  // Drafts propose only this many tokens (0: any), ranked by `mtp_draft_vocab_file` or by id
  // (model/draft_vocab.hpp).
  int64_t mtp_draft_vocab = 0;
  std::string mtp_draft_vocab_file;
};

class reference_engine {
public:
  reference_engine(std::shared_ptr<const model_weights> weights, engine_options options = {});

  // Throws std::invalid_argument for an empty prompt, a negative max_tokens, or a prompt plus
  // max_tokens beyond the context limit; kv_cache_full when the cache cannot hold the request.
  generation_result generate(const generation_request& request);

  // Prefills all prompts in one packed step, then decodes them together (continuous batching:
  // finished sequences leave the batch). Results equal generate() on each request alone.
  std::vector<generation_result> generate_batch(std::span<const generation_request> requests);

  // Logits of the last prompt position after a prefill, for tests comparing precisions and
  // attention paths. Leaves the cache empty.
  std::vector<float> prompt_logits(std::span<const int32_t> prompt);

  transformer& model() { return model_; }
  kv_block_pool& pool() { return pool_; }
  const engine_options& options() const { return options_; }

private:
  void validate(const generation_request& r) const;

  std::shared_ptr<const model_weights> weights_;
  engine_options options_;
  transformer model_;
  kv_block_pool pool_;
  decode_stepper stepper_;
};

} // namespace supernode::model
