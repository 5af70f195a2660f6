#include "model/tokenizer/added_tokens.hpp"

#include "model/tokenizer/regex.hpp"
#include "model/tokenizer/utf8.hpp"

#include <filesystem>

namespace supernode::model::detail {
namespace {

// Finds added tokens in text as Hugging Face's AddedVocabulary::find_matches: leftmost-longest,
// a single_word token only between non-word characters, lstrip/rstrip absorbing whitespace.
void split_with(const std::vector<added_token>& added, const token_trie& trie,
                std::string_view text, size_t base, std::vector<section>& out) {
  // Rust regex's \w (UTS #18), which the Rust library tests for single_word.
  static const regex word_char(R"(\A[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])", false,
                               std::filesystem::path("(built-in)"));
  auto is_word_at = [&](size_t i) {
    bool found = false;
    word_char.for_each_match(text.substr(i, utf8_sequence_length(text[i])),
                             [&](size_t, size_t) { found = true; });
    return found;
  };

  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.may_start(static_cast<unsigned char>(text[pos]))) {
      ++pos;
      continue;
    }
    const auto [len, index] = trie.longest_at(text, pos);
    if (len == 0) {
      ++pos;
      continue;
    }
    const added_token& t = added[index];
    size_t start = pos;
    size_t stop = pos + len;
    pos = stop;
    if (t.single_word) {
      const bool word_before = start > 0 && is_word_at(previous_char_start(text, start));
      const bool word_after = stop < text.size() && is_word_at(stop);
      if (word_before || word_after) continue;
    }
    if (t.lstrip) {
      size_t s = start;
      while (s > start_offset) {
        const size_t p = previous_char_start(text, s);
        if (!is_white_space(decode_at(text, p))) break;
        s = p;
      }
      start = s;
    }
    if (t.rstrip) {
      while (stop < text.size() && is_white_space(decode_at(text, stop))) {
        stop += utf8_sequence_length(text[stop]);
      }
      pos = stop;
    }
    if (start_offset < start) out.push_back({base + start_offset, base + start, -1});
    out.push_back({base + start, base + stop, t.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({base + start_offset, base + text.size(), -1});
}

} // namespace

std::vector<section> split_added_tokens(const std::vector<added_token>& added,
                                        const token_trie& raw_tokens,
                                        const token_trie& normalized_tokens,
                                        std::string_view text) {
  std::vector<section> first;
  if (raw_tokens.empty()) {
    first.push_back({0, text.size(), -1});
  } else {
    split_with(added, raw_tokens, text, 0, first);
  }
  if (normalized_tokens.empty()) return first;
  std::vector<section> out;
  out.reserve(first.size());
  for (const section& s : first) {
    if (s.token_id >= 0) {
      out.push_back(s);
    } else {
      split_with(added, normalized_tokens, text.substr(s.begin, s.end - s.begin), s.begin, out);
    }
  }
  return out;
}

} // namespace supernode::model::detail
