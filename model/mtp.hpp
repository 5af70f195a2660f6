#pragma once
// What speculative decoding with the MTP module (DeepSeek-V3 §2.2, CloudMatrix-Infer §4.2.3)
// keeps between steps, and the MTP rows of a prefill. The MTP row of position i combines the
// main model's hidden state at i with the token at i + 1 and predicts the token at i + 2; it has
// a KV layer of its own in the sequence's blocks (kv_layout(…, true)). So the row of a
// sequence's latest position waits for the token sampled from it: these are the rows a step
// computes before it drafts (decode_step.hpp).

#include "model/kv_cache.hpp"
#include "model/transformer.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace supernode::model {

// The main model's hidden states of the positions whose MTP row is not computed yet, with the
// token that follows each.
struct mtp_state {
  int64_t first_position = -1; // of row 0 (or of the next row); -1: no row yet
  std::vector<float> hidden;   // [rows][hidden_size]
  std::vector<int32_t> following;
  // A gap in the rows (the sequence's KV came from where its hidden states did not, as a
  // request resumed from mirrored KV): it decodes on without drafts, with the same tokens.
  bool broken = false;

  int64_t rows() const { return static_cast<int64_t>(following.size()); }
  int64_t end_position() const { return first_position + rows(); }
  // Appends position `pos`; a position other than end_position() breaks the state.
  void append(int64_t pos, const float* h, int64_t hidden_size, int32_t following_token);
  // The rows were computed (their KV written): the next ones start at `next_position`.
  void consumed(int64_t next_position);
};

// A prefill chunk as the main forward ran it, over `prompt` (the whole prompt).
struct mtp_prefill_chunk {
  kv_block_table* table = nullptr;
  std::span<const int32_t> prompt;
  int64_t first_pos = 0;
  int64_t n_tokens = 0;
};

// Writes the MTP KV of the chunks' positions that have a following prompt token (all but a
// prompt's last), from the main forward's hidden rows [chunks' tokens][hidden] in chunk order.
// In prefill mode, as the main layers; a prompt's last position gets its row in its first
// decode step, once its first token is known (mtp_state).
void mtp_prefill(transformer& model, std::span<const mtp_prefill_chunk> chunks,
                 const float* main_hidden, kv_block_pool& pool);

// A state holding rows from `first_position` on (as kv_transfer carries them); broken when
// the sizes disagree.
mtp_state mtp_state_of_rows(int64_t first_position, std::span<const int32_t> following,
                            std::span<const float> hidden, int64_t hidden_size);

// The state a sequence starts decoding with after its prompt of `prompt_tokens`: the last
// prompt position's hidden state, waiting for its first token.
mtp_state mtp_state_after_prefill(int64_t prompt_tokens, std::span<const float> last_hidden,
                                  int32_t first_token);

} // namespace supernode::model
