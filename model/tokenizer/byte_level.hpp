#pragma once
// GPT-2's reversible byte <-> printable character mapping used by the ByteLevel components.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace supernode::model::detail {

struct byte_level_table {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int16_t, 512> char_to_byte{}; // every mapped code point is below 0x144

  byte_level_table();

  // Each byte as the UTF-8 of its printable character.
  std::string encode(std::string_view bytes) const;

  // The ByteLevel decoder's rule: a token all of whose characters are mapped bytes becomes those
  // bytes, anything else (added tokens such as <｜User｜>) stays as its own UTF-8.
  std::string decode(std::string_view token) const;
};

// The one shared table.
const byte_level_table& byte_level();

} // namespace supernode::model::detail
