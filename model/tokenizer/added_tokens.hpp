#pragma once
// Added tokens: leftmost-longest matching over a byte trie, as aho-corasick's LeftmostLongest.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace supernode::model::detail {

struct added_token {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

class token_trie {
public:
  token_trie() : nodes_(1) { first_byte_.fill(false); }

  void add(std::string_view word, int32_t token_index) {
    if (word.empty()) return;
    first_byte_[static_cast<unsigned char>(word[0])] = true;
    uint32_t node = 0;
    for (unsigned char b : word) {
      auto& next = nodes_[node].next;
      auto it = std::find_if(next.begin(), next.end(), [b](const auto& e) { return e.first == b; });
      if (it == next.end()) {
        next.emplace_back(b, static_cast<uint32_t>(nodes_.size()));
        node = static_cast<uint32_t>(nodes_.size());
        nodes_.emplace_back();
      } else {
        node = it->second;
      }
    }
    nodes_[node].token = token_index;
  }

  bool empty() const { return nodes_[0].next.empty(); }
  bool may_start(unsigned char b) const { return first_byte_[b]; }

  // Longest token starting at text[pos]: (length, token index), or length 0.
  std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const {
    std::pair<size_t, int32_t> best{0, -1};
    uint32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      const auto b = static_cast<unsigned char>(text[i]);
      const auto& next = nodes_[node].next;
      auto it = std::find_if(next.begin(), next.end(), [b](const auto& e) { return e.first == b; });
      if (it == next.end()) break;
      node = it->second;
      if (nodes_[node].token >= 0) best = {i + 1 - pos, nodes_[node].token};
    }
    return best;
  }

private:
  struct node {
    std::vector<std::pair<unsigned char, uint32_t>> next;
    int32_t token = -1;
  };
  std::vector<node> nodes_;
  std::array<bool, 256> first_byte_{};
};

// A stretch of the input: either an added token or text to run through the BPE pipeline.
struct section {
  size_t begin;
  size_t end;
  int32_t token_id; // -1 for text
};

// Cuts text into added tokens and the text between them, as Hugging Face's AddedVocabulary:
// tokens with normalized=false (raw_tokens) match first, the others (normalized_tokens) in
// what is left. Token indexes in the tries are positions in added.
std::vector<section> split_added_tokens(const std::vector<added_token>& added,
                                        const token_trie& raw_tokens,
                                        const token_trie& normalized_tokens, std::string_view text);

} // namespace supernode::model::detail
