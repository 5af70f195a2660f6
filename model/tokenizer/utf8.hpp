#pragma once
// UTF-8 helpers for the tokenizer. The inline ones expect text already checked by
// find_invalid_utf8.

#include <cstddef>
#include <string>
#include <string_view>

namespace supernode::model::detail {

inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1; // continuation or invalid lead: callers only step over validated text
}

// Offset of the first byte that does not start a well-formed UTF-8 sequence (overlongs,
// surrogates and code points past U+10FFFF included), or npos.
size_t find_invalid_utf8(std::string_view s);

// Decodes the code point starting at s[i] of validated text.
inline char32_t decode_at(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t len = utf8_sequence_length(p[0]);
  if (len == 1) return p[0];
  char32_t cp = p[0] & (0xFF >> (len + 1));
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[k] & 0x3F);
  return cp;
}

// Start of the code point that ends just before s[i] (i > 0) in validated text.
inline size_t previous_char_start(std::string_view s, size_t i) {
  do {
    --i;
  } while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return i;
}

void append_utf8(std::string& out, char32_t cp);

// Unicode White_Space: what Rust's char::is_whitespace (added-token lstrip/rstrip) and
// Oniguruma's \s (the Split regexes in Hugging Face tokenizers) both use.
inline bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

} // namespace supernode::model::detail
