#pragma once
// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (+ tokenizer_config.json),
// producing the same ids as the Rust `tokenizers` library for DeepSeek-V3.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::model {

class tokenizer {
public:
  // Reads dir/tokenizer.json and dir/tokenizer_config.json. Throws std::runtime_error naming the
  // file and the problem when either is missing, malformed, or uses a component we do not
  // implement (better to refuse than to tokenize differently from the model's training).
  static tokenizer load(const std::filesystem::path& dir);

  tokenizer(tokenizer&&) noexcept;
  tokenizer& operator=(tokenizer&&) noexcept;
  ~tokenizer();

  // Added tokens (special or not) written in the text become their single ids, as Hugging Face
  // does by default. The text must be valid UTF-8: std::invalid_argument names the bad offset.
  // Safe to call from several threads at once.
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false) const;

  // Concatenated raw bytes of the tokens. Partial UTF-8 sequences are kept as they are rather
  // than replaced, so pieces decoded separately while streaming join into the right text.
  // skip_special drops tokens flagged "special" in tokenizer.json (not e.g. <｜User｜>, which
  // DeepSeek-V3 marks as non-special). Ids outside the vocabulary throw std::out_of_range,
  // unless skip_unknown: generated text, where a model may pick one of the rows its embedding
  // is padded with past the tokenizer (DeepSeek-V3: 129,280 rows for ~128,800 tokens).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false,
                     bool skip_unknown = false) const;

  // Raw bytes of one token (may be an incomplete UTF-8 sequence).
  std::string token_piece(int32_t id) const;

  int32_t bos_id() const;
  int32_t eos_id() const;
  // Largest id + 1 over the BPE vocabulary and the added tokens.
  int32_t vocab_size() const;
  // Id of a token given as it is spelled in tokenizer.json: the content of an added token, or a
  // vocabulary entry in its byte-level form (a leading space is "Ġ").
  std::optional<int32_t> token_id(std::string_view token_text) const;

private:
  struct impl;
  explicit tokenizer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

} // namespace supernode::model
