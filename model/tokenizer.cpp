#include "model/tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <algorithm>
#include <array>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <pcre2.h>
#include <shared_mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace supernode::model {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw std::runtime_error(file.string() + ": " + what);
}

// ---------------------------------------------------------------------------------------------
// UTF-8

size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1; // continuation or invalid lead: callers only step over validated text
}

// Offset of the first byte that does not start a well-formed UTF-8 sequence (overlongs,
// surrogates and code points past U+10FFFF included), or npos.
size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    char32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// Decodes the code point starting at s[i] of validated text.
char32_t decode_at(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t len = utf8_sequence_length(p[0]);
  if (len == 1) return p[0];
  char32_t cp = p[0] & (0xFF >> (len + 1));
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[k] & 0x3F);
  return cp;
}

// Start of the code point that ends just before s[i] (i > 0) in validated text.
size_t previous_char_start(std::string_view s, size_t i) {
  do {
    --i;
  } while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return i;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Unicode White_Space: what Rust's char::is_whitespace (added-token lstrip/rstrip) and
// Oniguruma's \s (the Split regexes in Hugging Face tokenizers) both use.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

constexpr std::string_view white_space_class_body =
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";

// ---------------------------------------------------------------------------------------------
// GPT-2's reversible byte <-> printable character mapping used by the ByteLevel components.

struct byte_level_table {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int16_t, 512> char_to_byte{}; // every mapped code point is below 0x144

  byte_level_table() {
    char_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c =
          printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      byte_to_char[b] = c;
      char_to_byte[c] = static_cast<int16_t>(b);
    }
  }

  std::string encode(std::string_view bytes) const {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) append_utf8(out, byte_to_char[b]);
    return out;
  }

  // The ByteLevel decoder's rule: a token all of whose characters are mapped bytes becomes those
  // bytes, anything else (added tokens such as <｜User｜>) stays as its own UTF-8.
  std::string decode(std::string_view token) const {
    std::string out;
    out.reserve(token.size());
    for (size_t i = 0; i < token.size(); i += utf8_sequence_length(token[i])) {
      const char32_t c = decode_at(token, i);
      if (c >= char_to_byte.size() || char_to_byte[c] < 0) return std::string(token);
      out += static_cast<char>(char_to_byte[c]);
    }
    return out;
  }
};

const byte_level_table& byte_level() {
  static const byte_level_table table;
  return table;
}

// ---------------------------------------------------------------------------------------------
// Regexes. tokenizer.json patterns are written for Oniguruma; PCRE2 with UTF+UCP agrees with it
// on everything these patterns use except the meaning of \s (PCRE2 adds U+180E) and \h (a hex
// digit in Oniguruma, horizontal space in PCRE2), so those escapes are spelled out.

std::string onig_to_pcre2(std::string_view pattern) {
  const std::string ws(white_space_class_body);
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? ws : "[" + ws + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + ws + "]";
      } else if (e == 'h') {
        out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
      } else if (e == 'H' && !in_class) {
        out += "[^0-9a-fA-F]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct pcre2_code_free_fn {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};

// Per-thread matching state, so that one tokenizer serves concurrent encode() calls.
struct match_scratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  match_scratch() {
    data = pcre2_match_data_create(16, nullptr);
    context = pcre2_match_context_create(nullptr);
    // The default 32 KiB JIT stack is enough for these patterns on ordinary text, but a long
    // run of one character class must not turn into an error.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    if (!data || !context) throw std::bad_alloc();
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~match_scratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  match_scratch(const match_scratch&) = delete;
  match_scratch& operator=(const match_scratch&) = delete;
};

match_scratch& thread_scratch() {
  thread_local match_scratch scratch;
  return scratch;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0)
    return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

class regex {
public:
  regex(std::string_view pattern, bool literal, const fs::path& file) {
    const std::string translated = literal ? std::string(pattern) : onig_to_pcre2(pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              options, &error, &offset, nullptr));
    if (!code_) {
      fail(file, "cannot compile pre-tokenizer regex \"" + std::string(pattern) + "\" at offset " +
                     std::to_string(offset) + ": " + pcre2_message(error));
    }
    // Without JIT (unsupported platform) the interpreter gives the same matches, only slower.
    pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);
  }

  // Calls fn(begin, end) for each match in subject, stepping over an empty match that touches
  // the previous one as Oniguruma's find_iter (and so Hugging Face) does.
  template<class Fn>
  void for_each_match(std::string_view subject, Fn&& fn) const {
    match_scratch& scratch = thread_scratch();
    const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
    const size_t n = subject.size();
    size_t pos = 0;
    size_t last_end = std::string_view::npos;
    while (pos <= n) {
      const int rc =
          pcre2_match(code_.get(), data, n, pos, PCRE2_NO_UTF_CHECK, scratch.data, scratch.context);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) throw std::runtime_error("tokenizer: regex match failed: " + pcre2_message(rc));
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
      const size_t begin = ovector[0];
      const size_t end = ovector[1];
      if (begin == end && last_end == end) {
        pos = pos < n ? pos + utf8_sequence_length(subject[pos]) : n + 1;
        continue;
      }
      fn(begin, end);
      pos = end;
      last_end = end;
    }
  }

private:
  std::unique_ptr<pcre2_code, pcre2_code_free_fn> code_;
};

// ---------------------------------------------------------------------------------------------
// Pre-tokenization. A piece is a byte range of the text section being encoded; prefix_space marks
// a space that ByteLevel(add_prefix_space) put in front of it.

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

struct span_flag {
  size_t begin;
  size_t end;
  bool flag; // true: a pattern match (before the behavior) / to be removed (after it)
};

// The matches and the gaps between them, as Hugging Face's Pattern::find_matches gives them.
void find_matches(const regex& re, std::string_view subject, bool invert,
                  std::vector<span_flag>& out) {
  out.clear();
  size_t prev = 0;
  re.for_each_match(subject, [&](size_t begin, size_t end) {
    if (prev != begin) out.push_back({prev, begin, invert});
    out.push_back({begin, end, !invert});
    prev = end;
  });
  if (prev != subject.size()) out.push_back({prev, subject.size(), invert});
}

// NormalizedString::split: turns matches into kept/removed spans per behavior.
void apply_behavior(split_behavior behavior, std::vector<span_flag>& spans) {
  std::vector<span_flag> out;
  out.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
  case split_behavior::removed:
    return; // flag already says "remove" for matches
  case split_behavior::isolated:
    for (auto& s : spans) s.flag = false;
    return;
  case split_behavior::contiguous:
    for (const auto& s : spans) {
      if (s.flag == previous_match && !out.empty()) {
        out.back().end = s.end;
      } else {
        out.push_back({s.begin, s.end, false});
      }
      previous_match = s.flag;
    }
    break;
  case split_behavior::merged_with_previous:
    for (const auto& s : spans) {
      if (s.flag && !previous_match && !out.empty()) {
        out.back().end = s.end;
      } else {
        out.push_back({s.begin, s.end, false});
      }
      previous_match = s.flag;
    }
    break;
  case split_behavior::merged_with_next:
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      if (it->flag && !previous_match && !out.empty()) {
        out.back().begin = it->begin;
      } else {
        out.push_back({it->begin, it->end, false});
      }
      previous_match = it->flag;
    }
    std::reverse(out.begin(), out.end());
    break;
  }
  spans.swap(out);
}

struct byte_level_step {
  bool add_prefix_space = false;
  std::unique_ptr<regex> pattern; // null when use_regex is false
};

// ---------------------------------------------------------------------------------------------
// Added tokens: leftmost-longest matching over a byte trie, as aho-corasick's LeftmostLongest.

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

// ---------------------------------------------------------------------------------------------
// BPE merges.

struct merge_info {
  uint32_t rank;
  int32_t new_id;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct string_hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// ---------------------------------------------------------------------------------------------
// JSON helpers that name the file and field on error.

json read_json(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, "cannot open file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  try {
    return json::parse(buffer.str());
  } catch (const json::exception& e) {
    fail(file, std::string("invalid JSON: ") + e.what());
  }
}

const json& require(const json& object, const char* key, const fs::path& file,
                    const std::string& where) {
  if (!object.is_object()) fail(file, where + " is not a JSON object");
  auto it = object.find(key);
  if (it == object.end()) fail(file, where + " has no \"" + key + "\"");
  return *it;
}

bool bool_field(const json& object, const char* key, bool fallback, const fs::path& file,
                const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(file, where + "." + key + " is not a boolean");
  return it->get<bool>();
}

std::string type_of(const json& component, const fs::path& file, const std::string& where) {
  const json& type = require(component, "type", file, where);
  if (!type.is_string()) fail(file, where + ".type is not a string");
  return type.get<std::string>();
}

} // namespace

// ---------------------------------------------------------------------------------------------

struct tokenizer::impl {
  fs::path json_file;

  // Vocabulary and added tokens.
  std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> vocab;
  std::vector<added_token> added;
  std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> added_by_content;
  std::vector<std::string> pieces; // decoded bytes per id
  std::vector<uint8_t> id_kind;    // 0 unused id, 1 vocabulary, 2 added non-special, 3 special
  int32_t bos = -1;
  int32_t eos = -1;

  // Added-token matching: tokens with normalized=false match the raw text first, the others
  // match what is left after normalization (identity here: we accept no normalizer that changes
  // text).
  token_trie raw_tokens;
  token_trie normalized_tokens;

  // Pre-tokenizer and model.
  std::vector<split_step> splits;
  byte_level_step byte_level_pre;
  bool byte_level_seen = false;
  std::array<int32_t, 256> byte_ids{}; // id of each byte's one-character token, -1 if absent
  std::unordered_map<uint64_t, merge_info> merges;
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool ignore_merges = false;

  // Words seen before. HF keeps a similar bounded cache; it changes speed only.
  static constexpr size_t cache_capacity = 1 << 16;
  static constexpr size_t cache_max_word = 256;
  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, string_hash, std::equal_to<>> cache;

  void parse_normalizer(const json& n, const std::string& where);
  void parse_pre_tokenizer(const json& p, const std::string& where);
  void parse_model(const json& m);
  void parse_decoder(const json& d, const std::string& where);
  void parse_added_tokens(const json& a);

  std::vector<section> split_added_tokens(std::string_view text) const;
  void split_with(const token_trie& trie, std::string_view text, size_t base,
                  std::vector<section>& out) const;
  void pre_tokenize(std::string_view text, std::vector<piece>& out) const;
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view word, std::vector<int32_t>& out) const;
};

void tokenizer::impl::parse_normalizer(const json& n, const std::string& where) {
  if (n.is_null()) return;
  const std::string type = type_of(n, json_file, where);
  if (type == "Sequence") {
    const json& list = require(n, "normalizers", json_file, where);
    if (!list.is_array()) fail(json_file, where + ".normalizers is not an array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
    return;
  }
  fail(json_file, where + " of type \"" + type +
                      "\" is not supported (only an empty Sequence, which leaves text unchanged)");
}

void tokenizer::impl::parse_pre_tokenizer(const json& p, const std::string& where) {
  if (p.is_null()) return;
  const std::string type = type_of(p, json_file, where);
  // ByteLevel turns text into byte symbols: a step after it would split those, not text.
  if (byte_level_seen && type != "Sequence")
    fail(json_file, where + " (" + type + ") comes after the ByteLevel step, which must be last");
  if (type == "Sequence") {
    const json& list = require(p, "pretokenizers", json_file, where);
    if (!list.is_array()) fail(json_file, where + ".pretokenizers is not an array");
    for (size_t i = 0; i < list.size(); ++i) {
      parse_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
    }
    return;
  }
  if (type == "Split") {
    const json& pattern = require(p, "pattern", json_file, where);
    split_step step;
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      step.pattern = std::make_unique<regex>(pattern["Regex"].get<std::string>(), false, json_file);
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      step.pattern = std::make_unique<regex>(pattern["String"].get<std::string>(), true, json_file);
    } else {
      fail(json_file, where + ".pattern has neither a \"Regex\" nor a \"String\"");
    }
    const json& behavior = require(p, "behavior", json_file, where);
    static const std::pair<const char*, split_behavior> names[] = {
        {"Removed", split_behavior::removed},
        {"Isolated", split_behavior::isolated},
        {"MergedWithPrevious", split_behavior::merged_with_previous},
        {"MergedWithNext", split_behavior::merged_with_next},
        {"Contiguous", split_behavior::contiguous}};
    auto it = std::find_if(std::begin(names), std::end(names), [&](const auto& e) {
      return behavior.is_string() && behavior.get<std::string>() == e.first;
    });
    if (it == std::end(names))
      fail(json_file, where + ".behavior " + behavior.dump() + " is unknown");
    step.behavior = it->second;
    step.invert = bool_field(p, "invert", false, json_file, where);
    splits.push_back(std::move(step));
    return;
  }
  if (type == "ByteLevel") {
    byte_level_seen = true;
    byte_level_pre.add_prefix_space = bool_field(p, "add_prefix_space", true, json_file, where);
    if (bool_field(p, "use_regex", true, json_file, where)) {
      byte_level_pre.pattern = std::make_unique<regex>(
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false,
          json_file);
    }
    return;
  }
  fail(json_file,
       where + " of type \"" + type + "\" is not supported (Sequence, Split and ByteLevel are)");
}

void tokenizer::impl::parse_decoder(const json& d, const std::string& where) {
  const std::string type = type_of(d, json_file, where);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const json& list = require(d, "decoders", json_file, where);
    if (!list.is_array() || list.empty())
      fail(json_file, where + ".decoders is not a non-empty array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]");
    return;
  }
  fail(json_file, where + " of type \"" + type + "\" is not supported (only ByteLevel)");
}

void tokenizer::impl::parse_model(const json& m) {
  const std::string where = "model";
  if (!m.is_object()) fail(json_file, "\"model\" is not a JSON object");
  if (m.contains("type") && type_of(m, json_file, where) != "BPE") {
    fail(json_file,
         "model of type \"" + m["type"].get<std::string>() + "\" is not supported (only BPE)");
  }
  const json& v = require(m, "vocab", json_file, where);
  if (!v.is_object()) fail(json_file, "model.vocab is not a JSON object");
  vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX - 1) {
      fail(json_file, "model.vocab[" + json(it.key()).dump() + "] is not a valid token id");
    }
    vocab.emplace(it.key(), it.value().get<int32_t>());
  }

  // Options that change which tokens come out; refuse the ones we do not implement.
  if (auto it = m.find("dropout");
      it != m.end() && !it->is_null() && !(it->is_number() && it->get<double>() == 0.0)) {
    fail(json_file, "model.dropout is not supported (it makes encoding random)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto it = m.find(key);
        it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      fail(json_file, std::string("model.") + key + " is not supported");
    }
  }
  if (bool_field(m, "byte_fallback", false, json_file, where))
    fail(json_file, "model.byte_fallback is not supported");
  fuse_unk = bool_field(m, "fuse_unk", false, json_file, where);
  ignore_merges = bool_field(m, "ignore_merges", false, json_file, where);
  if (auto it = m.find("unk_token"); it != m.end() && !it->is_null()) {
    if (!it->is_string()) fail(json_file, "model.unk_token is not a string");
    auto found = vocab.find(it->get<std::string>());
    if (found == vocab.end())
      fail(json_file, "model.unk_token " + it->dump() + " is not in model.vocab");
    unk_id = found->second;
  }

  const json& list = require(m, "merges", json_file, where);
  if (!list.is_array()) fail(json_file, "model.merges is not an array");
  merges.reserve(list.size());
  std::string joined;
  for (size_t rank = 0; rank < list.size(); ++rank) {
    const json& entry = list[rank];
    std::string_view left, right;
    if (entry.is_string()) {
      // Old format "a b": exactly one space, as the Rust library requires.
      const std::string& s = entry.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        fail(json_file, "model.merges[" + std::to_string(rank) + "] " + entry.dump() +
                            " is not two tokens separated by one space");
      }
      left = std::string_view(s).substr(0, space);
      right = std::string_view(s).substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
               entry[1].is_string()) {
      left = entry[0].get_ref<const std::string&>();
      right = entry[1].get_ref<const std::string&>();
    } else {
      fail(json_file,
           "model.merges[" + std::to_string(rank) + "] is neither \"a b\" nor [\"a\", \"b\"]");
    }
    joined.assign(left);
    joined.append(right);
    auto l = vocab.find(left);
    auto r = vocab.find(right);
    auto j = vocab.find(joined);
    if (l == vocab.end() || r == vocab.end() || j == vocab.end()) {
      fail(json_file, "model.merges[" + std::to_string(rank) + "] " + entry.dump() +
                          " uses a token missing from model.vocab");
    }
    // A repeated pair keeps its last rank, as in the Rust library's map construction.
    merges.insert_or_assign(pair_key(l->second, r->second),
                            merge_info{static_cast<uint32_t>(rank), j->second});
  }

  const auto& table = byte_level();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    append_utf8(symbol, table.byte_to_char[b]);
    auto it = vocab.find(symbol);
    byte_ids[b] = it == vocab.end() ? -1 : it->second;
  }
}

void tokenizer::impl::parse_added_tokens(const json& a) {
  if (a.is_null()) return;
  if (!a.is_array()) fail(json_file, "added_tokens is not an array");
  // The Rust library ignores the ids written here: a token already in the vocabulary keeps its
  // id and a new one gets the next free id, in file order. For DeepSeek-V3 both agree.
  const auto model_size = static_cast<int32_t>(vocab.size());
  int32_t max_added = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& e = a[i];
    added_token t;
    const json& id = require(e, "id", json_file, where);
    if (!id.is_number_integer()) fail(json_file, where + ".id is not an integer");
    const json& content = require(e, "content", json_file, where);
    if (!content.is_string()) fail(json_file, where + ".content is not a string");
    if (find_invalid_utf8(content.get_ref<const std::string&>()) != std::string_view::npos) {
      fail(json_file, where + ".content is not valid UTF-8");
    }
    t.content = content.get<std::string>();
    t.special = bool_field(e, "special", false, json_file, where);
    t.lstrip = bool_field(e, "lstrip", false, json_file, where);
    t.rstrip = bool_field(e, "rstrip", false, json_file, where);
    t.single_word = bool_field(e, "single_word", false, json_file, where);
    t.normalized = bool_field(e, "normalized", !t.special, json_file, where);
    // Skipped by the Rust library too: an empty token never matches, a repeat adds nothing.
    if (t.content.empty() || added_by_content.contains(t.content)) continue;
    if (auto v = vocab.find(t.content); v != vocab.end()) {
      t.id = v->second;
    } else if (max_added < 0) {
      t.id = model_size;
    } else {
      t.id = max_added >= model_size || model_size == 0 ? max_added + 1 : model_size;
    }
    max_added = std::max(max_added, t.id);
    added_by_content.emplace(t.content, t.id);
    added.push_back(std::move(t));
  }
  for (size_t i = 0; i < added.size(); ++i) {
    (added[i].normalized ? normalized_tokens : raw_tokens)
        .add(added[i].content, static_cast<int32_t>(i));
  }
}

tokenizer tokenizer::load(const fs::path& dir) {
  auto p = std::make_unique<impl>();
  p->json_file = dir / "tokenizer.json";
  const fs::path config_file = dir / "tokenizer_config.json";
  const json root = read_json(p->json_file);
  const json config = read_json(config_file);
  if (!root.is_object()) fail(p->json_file, "top level is not a JSON object");
  if (!config.is_object()) fail(config_file, "top level is not a JSON object");

  p->byte_ids.fill(-1);
  if (auto it = root.find("normalizer"); it != root.end()) p->parse_normalizer(*it, "normalizer");
  p->parse_model(require(root, "model", p->json_file, "top level"));
  if (auto it = root.find("added_tokens"); it != root.end()) p->parse_added_tokens(*it);

  if (auto it = root.find("pre_tokenizer"); it != root.end())
    p->parse_pre_tokenizer(*it, "pre_tokenizer");
  // Ids are byte-level symbols: without a ByteLevel step text would reach BPE undecomposed.
  if (!p->byte_level_seen)
    fail(p->json_file, "pre_tokenizer has no ByteLevel step (this is a byte-level BPE tokenizer)");
  p->parse_decoder(require(root, "decoder", p->json_file, "top level"), "decoder");
  // post_processor only matters for add_special_tokens, which encode() replaces by add_bos.

  // Id table: added tokens take precedence over a vocabulary entry with the same id, as in
  // Hugging Face's id_to_token.
  int32_t size = 0;
  for (const auto& [text, id] : p->vocab) size = std::max(size, id + 1);
  for (const auto& t : p->added) size = std::max(size, t.id + 1);
  // The id table is dense; a stray huge id must not turn into a giant allocation.
  if (size > (1 << 24)) fail(p->json_file, "token ids above 16777215 are not supported");
  p->pieces.assign(size, {});
  p->id_kind.assign(size, 0);
  const auto& table = byte_level();
  for (const auto& [text, id] : p->vocab) {
    p->pieces[id] = table.decode(text);
    p->id_kind[id] = 1;
  }
  for (const auto& t : p->added) {
    p->pieces[t.id] = table.decode(t.content);
    p->id_kind[t.id] = t.special ? 3 : 2;
  }

  auto special_token = [&](const char* key) {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) fail(config_file, std::string("no \"") + key + "\"");
    std::string content;
    if (it->is_string()) {
      content = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      content = (*it)["content"].get<std::string>();
    } else {
      fail(config_file,
           std::string("\"") + key + "\" is neither a string nor an object with \"content\"");
    }
    if (auto a = p->added_by_content.find(content); a != p->added_by_content.end())
      return a->second;
    if (auto v = p->vocab.find(content); v != p->vocab.end()) return v->second;
    fail(config_file, std::string("\"") + key + "\" " + json(content).dump() +
                          " is not a token of " + p->json_file.string());
  };
  p->bos = special_token("bos_token");
  p->eos = special_token("eos_token");
  return tokenizer(std::move(p));
}

tokenizer::tokenizer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
tokenizer::tokenizer(tokenizer&&) noexcept = default;
tokenizer& tokenizer::operator=(tokenizer&&) noexcept = default;
tokenizer::~tokenizer() = default;

// Finds added tokens in text as Hugging Face's AddedVocabulary::find_matches: leftmost-longest,
// a single_word token only between non-word characters, lstrip/rstrip absorbing whitespace.
void tokenizer::impl::split_with(const token_trie& trie, std::string_view text, size_t base,
                                 std::vector<section>& out) const {
  // Rust regex's \w (UTS #18), which the Rust library tests for single_word.
  static const regex word_char(R"(\A[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])", false,
                               fs::path("(built-in)"));
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

std::vector<section> tokenizer::impl::split_added_tokens(std::string_view text) const {
  std::vector<section> first;
  if (raw_tokens.empty()) {
    first.push_back({0, text.size(), -1});
  } else {
    split_with(raw_tokens, text, 0, first);
  }
  if (normalized_tokens.empty()) return first;
  std::vector<section> out;
  out.reserve(first.size());
  for (const section& s : first) {
    if (s.token_id >= 0) {
      out.push_back(s);
    } else {
      split_with(normalized_tokens, text.substr(s.begin, s.end - s.begin), s.begin, out);
    }
  }
  return out;
}

void tokenizer::impl::pre_tokenize(std::string_view text, std::vector<piece>& out) const {
  out.clear();
  out.push_back({0, text.size()});
  std::vector<piece> next;
  std::vector<span_flag> spans;
  for (const split_step& step : splits) {
    next.clear();
    for (const piece& p : out) {
      find_matches(*step.pattern, text.substr(p.begin, p.end - p.begin), step.invert, spans);
      apply_behavior(step.behavior, spans);
      for (const span_flag& s : spans) {
        if (!s.flag && s.end > s.begin) next.push_back({p.begin + s.begin, p.begin + s.end});
      }
    }
    out.swap(next);
  }

  if (!byte_level_pre.add_prefix_space && !byte_level_pre.pattern) return;
  next.clear();
  std::string with_space;
  for (const piece& p : out) {
    std::string_view subject = text.substr(p.begin, p.end - p.begin);
    const bool prefix = byte_level_pre.add_prefix_space && subject.substr(0, 1) != " ";
    if (prefix) {
      with_space.clear();
      with_space += ' ';
      with_space.append(subject);
      subject = with_space;
    }
    if (!byte_level_pre.pattern) {
      next.push_back({p.begin, p.end, prefix});
      continue;
    }
    // Offsets in subject map back to text, the added space being "before" p.begin.
    const size_t shift = prefix ? 1 : 0;
    auto emit = [&](size_t b, size_t e) {
      if (e <= b) return;
      if (prefix && b == 0) {
        next.push_back({p.begin, p.begin + e - shift, true});
      } else {
        next.push_back({p.begin + b - shift, p.begin + e - shift});
      }
    };
    size_t prev = 0;
    byte_level_pre.pattern->for_each_match(subject, [&](size_t b, size_t e) {
      emit(prev, b);
      emit(b, e);
      prev = e;
    });
    emit(prev, subject.size());
  }
  out.swap(next);
}

// Merges the lowest-ranked adjacent pair first, leftmost on ties, exactly as the Rust library's
// Word::merge_all; a heap keeps long words (e.g. long whitespace runs) at O(n log n).
void tokenizer::impl::bpe_uncached(std::string_view word, std::vector<int32_t>& out) const {
  struct symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool removed;
  };
  struct candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
  };
  // std heap functions build a max-heap: "less" means lower priority.
  auto lower_priority = [](const candidate& a, const candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };

  thread_local std::vector<symbol> symbols;
  thread_local std::vector<candidate> heap;
  symbols.clear();
  heap.clear();

  // Initial symbols: one per byte; bytes without a token become unk (fused if asked) or vanish.
  bool last_was_unk = false;
  for (unsigned char b : word) {
    int32_t id = byte_ids[b];
    if (id < 0) {
      if (unk_id < 0) continue;
      if (fuse_unk && last_was_unk) continue;
      id = unk_id;
      last_was_unk = true;
    } else {
      last_was_unk = false;
    }
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, false});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto lookup = [&](int32_t left, int32_t right) -> const merge_info* {
    auto it = merges.find(pair_key(left, right));
    return it == merges.end() ? nullptr : &it->second;
  };
  auto push = [&](uint32_t pos, const merge_info& m) {
    heap.push_back({m.rank, pos, m.new_id});
    std::push_heap(heap.begin(), heap.end(), lower_priority);
  };

  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const merge_info* m = lookup(symbols[i].id, symbols[i + 1].id))
      push(static_cast<uint32_t>(i), *m);
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lower_priority);
    const candidate top = heap.back();
    heap.pop_back();
    symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    symbol& right = symbols[left.next];
    // A stale entry: one side has merged since it was queued.
    const merge_info* current = lookup(left.id, right.id);
    if (!current || current->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = static_cast<int32_t>(top.pos);
    if (left.prev >= 0) {
      if (const merge_info* m = lookup(symbols[left.prev].id, left.id))
        push(static_cast<uint32_t>(left.prev), *m);
    }
    if (left.next >= 0) {
      if (const merge_info* m = lookup(left.id, symbols[left.next].id)) push(top.pos, *m);
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

void tokenizer::impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (auto it = vocab.find(byte_level().encode(word)); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() == 1 && byte_ids[static_cast<unsigned char>(word[0])] >= 0) {
    out.push_back(byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  const bool cacheable = word.size() <= cache_max_word;
  if (cacheable) {
    std::shared_lock lock(cache_mutex);
    if (auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  bpe_uncached(word, out);
  if (cacheable) {
    std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    std::unique_lock lock(cache_mutex);
    // Dropping everything when full is crude but keeps memory bounded without LRU bookkeeping;
    // the frequent words come back within a few calls.
    if (cache.size() >= cache_capacity) cache.clear();
    cache.emplace(std::string(word), std::move(ids));
  }
}

std::vector<int32_t> tokenizer::encode(std::string_view text, bool add_bos) const {
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos) {
    throw std::invalid_argument("tokenizer::encode: text is not valid UTF-8 at byte offset " +
                                std::to_string(bad));
  }
  const impl& m = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_bos) ids.push_back(m.bos);

  std::vector<piece> pieces;
  std::string prefixed;
  for (const section& s : m.split_added_tokens(text)) {
    if (s.token_id >= 0) {
      ids.push_back(s.token_id);
      continue;
    }
    const std::string_view part = text.substr(s.begin, s.end - s.begin);
    m.pre_tokenize(part, pieces);
    for (const piece& p : pieces) {
      std::string_view word = part.substr(p.begin, p.end - p.begin);
      if (p.prefix_space) {
        prefixed.clear();
        prefixed += ' ';
        prefixed.append(word);
        word = prefixed;
      }
      m.bpe(word, ids);
    }
  }
  return ids;
}

std::string tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const impl& m = *impl_;
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(m.id_kind.size()) || m.id_kind[id] == 0) {
      throw std::out_of_range("tokenizer::decode: token id " + std::to_string(id) +
                              " is not in the vocabulary");
    }
    if (skip_special && m.id_kind[id] == 3) continue;
    out += m.pieces[id];
  }
  return out;
}

std::string tokenizer::token_piece(int32_t id) const {
  const impl& m = *impl_;
  if (id < 0 || id >= static_cast<int32_t>(m.id_kind.size()) || m.id_kind[id] == 0) {
    throw std::out_of_range("tokenizer::token_piece: token id " + std::to_string(id) +
                            " is not in the vocabulary");
  }
  return m.pieces[id];
}

int32_t tokenizer::bos_id() const {
  return impl_->bos;
}
int32_t tokenizer::eos_id() const {
  return impl_->eos;
}
int32_t tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->id_kind.size());
}

std::optional<int32_t> tokenizer::token_id(std::string_view token_text) const {
  if (auto it = impl_->added_by_content.find(token_text); it != impl_->added_by_content.end())
    return it->second;
  if (auto it = impl_->vocab.find(token_text); it != impl_->vocab.end()) return it->second;
  return std::nullopt;
}

} // namespace supernode::model
