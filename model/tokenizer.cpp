#include "model/tokenizer.hpp"

#include "model/tokenizer/added_tokens.hpp"
#include "model/tokenizer/bpe.hpp"
#include "model/tokenizer/byte_level.hpp"
#include "model/tokenizer/pretokenizer.hpp"
#include "model/tokenizer/regex.hpp"
#include "model/tokenizer/utf8.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

namespace supernode::model {

using namespace detail;

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw std::runtime_error(file.string() + ": " + what);
}

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

  // Added tokens (the vocabulary is in bpe).
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
  bpe_model bpe;

  void parse_normalizer(const json& n, const std::string& where);
  void parse_pre_tokenizer(const json& p, const std::string& where);
  void parse_model(const json& m);
  void parse_decoder(const json& d, const std::string& where);
  void parse_added_tokens(const json& a);
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
  bpe.vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > INT32_MAX - 1) {
      fail(json_file, "model.vocab[" + json(it.key()).dump() + "] is not a valid token id");
    }
    bpe.vocab.emplace(it.key(), it.value().get<int32_t>());
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
  bpe.fuse_unk = bool_field(m, "fuse_unk", false, json_file, where);
  bpe.ignore_merges = bool_field(m, "ignore_merges", false, json_file, where);
  if (auto it = m.find("unk_token"); it != m.end() && !it->is_null()) {
    if (!it->is_string()) fail(json_file, "model.unk_token is not a string");
    auto found = bpe.vocab.find(it->get<std::string>());
    if (found == bpe.vocab.end())
      fail(json_file, "model.unk_token " + it->dump() + " is not in model.vocab");
    bpe.unk_id = found->second;
  }

  const json& list = require(m, "merges", json_file, where);
  if (!list.is_array()) fail(json_file, "model.merges is not an array");
  bpe.merges.reserve(list.size());
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
    auto l = bpe.vocab.find(left);
    auto r = bpe.vocab.find(right);
    auto j = bpe.vocab.find(joined);
    if (l == bpe.vocab.end() || r == bpe.vocab.end() || j == bpe.vocab.end()) {
      fail(json_file, "model.merges[" + std::to_string(rank) + "] " + entry.dump() +
                          " uses a token missing from model.vocab");
    }
    // A repeated pair keeps its last rank, as in the Rust library's map construction.
    bpe.merges.insert_or_assign(pair_key(l->second, r->second),
                                merge_info{static_cast<uint32_t>(rank), j->second});
  }

  const auto& table = byte_level();
  for (int b = 0; b < 256; ++b) {
    std::string symbol;
    append_utf8(symbol, table.byte_to_char[b]);
    auto it = bpe.vocab.find(symbol);
    bpe.byte_ids[b] = it == bpe.vocab.end() ? -1 : it->second;
  }
}

void tokenizer::impl::parse_added_tokens(const json& a) {
  if (a.is_null()) return;
  if (!a.is_array()) fail(json_file, "added_tokens is not an array");
  // The Rust library ignores the ids written here: a token already in the vocabulary keeps its
  // id and a new one gets the next free id, in file order. For DeepSeek-V3 both agree.
  const auto model_size = static_cast<int32_t>(bpe.vocab.size());
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
    if (auto v = bpe.vocab.find(t.content); v != bpe.vocab.end()) {
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

  p->bpe.byte_ids.fill(-1);
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
  for (const auto& [text, id] : p->bpe.vocab) size = std::max(size, id + 1);
  for (const auto& t : p->added) size = std::max(size, t.id + 1);
  // The id table is dense; a stray huge id must not turn into a giant allocation.
  if (size > (1 << 24)) fail(p->json_file, "token ids above 16777215 are not supported");
  p->pieces.assign(size, {});
  p->id_kind.assign(size, 0);
  const auto& table = byte_level();
  for (const auto& [text, id] : p->bpe.vocab) {
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
    if (auto v = p->bpe.vocab.find(content); v != p->bpe.vocab.end()) return v->second;
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
  for (const section& s : split_added_tokens(m.added, m.raw_tokens, m.normalized_tokens, text)) {
    if (s.token_id >= 0) {
      ids.push_back(s.token_id);
      continue;
    }
    const std::string_view part = text.substr(s.begin, s.end - s.begin);
    pre_tokenize(m.splits, m.byte_level_pre, part, pieces);
    for (const piece& p : pieces) {
      std::string_view word = part.substr(p.begin, p.end - p.begin);
      if (p.prefix_space) {
        prefixed.clear();
        prefixed += ' ';
        prefixed.append(word);
        word = prefixed;
      }
      m.bpe.encode(word, ids);
    }
  }
  return ids;
}

std::string tokenizer::decode(std::span<const int32_t> ids, bool skip_special,
                              bool skip_unknown) const {
  const impl& m = *impl_;
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= static_cast<int32_t>(m.id_kind.size()) || m.id_kind[id] == 0) {
      if (skip_unknown) continue;
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
  if (auto it = impl_->bpe.vocab.find(token_text); it != impl_->bpe.vocab.end()) return it->second;
  return std::nullopt;
}

} // namespace supernode::model
