#pragma once
// Pre-tokenization: the Split steps of tokenizer.json, then ByteLevel's own regex and prefix
// space, cutting a text section into the words that BPE encodes one by one.

#include "model/tokenizer/regex.hpp"

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace supernode::model::detail {

// A piece is a byte range of the text section being encoded; prefix_space marks a space that
// ByteLevel(add_prefix_space) put in front of it.
struct piece {
  size_t begin;
  size_t end;
  bool prefix_space = false;
};

enum class split_behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct split_step {
  std::unique_ptr<regex> pattern;
  split_behavior behavior = split_behavior::isolated;
  bool invert = false;
};

struct byte_level_step {
  bool add_prefix_space = false;
  std::unique_ptr<regex> pattern; // null when use_regex is false
};

// Cuts text into pieces: each Split step in turn over every piece so far, then byte_level_pre.
void pre_tokenize(const std::vector<split_step>& splits, const byte_level_step& byte_level_pre,
                  std::string_view text, std::vector<piece>& out);

} // namespace supernode::model::detail
