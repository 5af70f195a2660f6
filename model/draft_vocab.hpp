#pragma once
// A reduced draft vocabulary for MTP drafting, after FR-Spec (Zhao et al., 2025): the draft's
// output head keeps only the rows of the tokens most likely to be drafted, so a draft reads a
// fraction of the head instead of all of it (on a model whose head is most of what a token
// reads, the full-vocabulary draft costs as much as the step it is meant to save).
// Verification still runs the full head, so outputs never change; only how often a draft is
// accepted does (a token outside the set is never drafted).

#include "kernels/quantize.hpp"
#include "model/linear.hpp"

#include <cstdint>
#include <filesystem>
#include <vector>

namespace supernode::model {

class draft_head {
public:
  // The rows `ids` of `head` ([vocab][hidden]), in that order, in the head's precision.
  draft_head(const linear& head, std::vector<int32_t> ids);

  // Logits of the kept tokens: out [rows][size()], column i for token ids()[i].
  void logits(const float* hidden, int64_t rows, std::vector<float>& out);
  const std::vector<int32_t>& ids() const { return ids_; }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }

private:
  std::vector<int32_t> ids_;
  linear rows_;
  kernels::quantized_rows scratch_;
};

// The `n` token ids a draft may propose, most frequent first: the ids listed in `ranked_file`
// (whitespace-separated, most frequent first, as a corpus count gives them), or without one the
// first n ids. Byte-level BPE numbers its tokens in merge order, and merges follow pair
// frequency in the tokenizer's training text, so low ids are the common tokens. Ids outside
// [0, vocab) or repeated are refused, naming the first.
std::vector<int32_t> draft_vocabulary(int64_t vocab, int64_t n,
                                      const std::filesystem::path& ranked_file = {});

} // namespace supernode::model
