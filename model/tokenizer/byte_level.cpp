#include "model/tokenizer/byte_level.hpp"

#include "model/tokenizer/utf8.hpp"

namespace supernode::model::detail {

byte_level_table::byte_level_table() {
  char_to_byte.fill(-1);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
    byte_to_char[b] = c;
    char_to_byte[c] = static_cast<int16_t>(b);
  }
}

std::string byte_level_table::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, byte_to_char[b]);
  return out;
}

std::string byte_level_table::decode(std::string_view token) const {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size(); i += utf8_sequence_length(token[i])) {
    const char32_t c = decode_at(token, i);
    if (c >= char_to_byte.size() || char_to_byte[c] < 0) return std::string(token);
    out += static_cast<char>(char_to_byte[c]);
  }
  return out;
}

const byte_level_table& byte_level() {
  static const byte_level_table table;
  return table;
}

} // namespace supernode::model::detail
