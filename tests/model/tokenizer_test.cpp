// The C++ tokenizer against the JavaScript port of Hugging Face tokenizers (run through node on
// the same tokenizer files), plus round trips, special tokens and error reporting.
#include "model/chat_template.hpp"
#include "model/tokenizer.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace supernode::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path tokenizer_dir = SUPERNODE_TOKENIZER_DIR;
const fs::path source_dir = SUPERNODE_SOURCE_DIR;

// Loading parses an 8 MB JSON file: share one instance across the tests of this process.
const tokenizer& deepseek() {
  static const tokenizer tok = tokenizer::load(tokenizer_dir);
  return tok;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// A fresh folder per test process, removed at the end of the test.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& name) {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() / ("supernode-" + name + "-" + std::to_string(::getpid()) +
                                        "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string quote(const fs::path& p) {
  std::string out = "'";
  for (char c : p.string()) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Runs tests/model/tokenize_reference.mjs on a request and returns its JSON answer.
json run_reference(const json& request) {
  const fs::path node_modules = source_dir / ".deps/npm/node_modules";
  const fs::path script = source_dir / "tests/model/tokenize_reference.mjs";
  const std::string node = fs::exists("/usr/bin/node") ? "/usr/bin/node" : "node";
  if (!fs::exists(node_modules / "@lenml/tokenizers/dist/main.mjs")) {
    throw std::runtime_error("missing " + (node_modules / "@lenml/tokenizers").string() +
                             ": run scripts/setup.sh (or ./supernode), which installs it");
  }
  temp_dir dir("tokref");
  write_file(dir.path / "request.json", request.dump());
  const std::string command = node + " " + quote(script) + " " + quote(node_modules) + " " +
                              quote(tokenizer_dir) + " " + quote(dir.path / "request.json") +
                              " > " + quote(dir.path / "answer.json") + " 2> " +
                              quote(dir.path / "stderr.txt");
  const int status = std::system(command.c_str());
  if (status != 0) {
    throw std::runtime_error("reference tokenizer failed (status " + std::to_string(status) +
                             "): " + command + "\n" + read_file(dir.path / "stderr.txt"));
  }
  return json::parse(read_file(dir.path / "answer.json"));
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string corpus() {
  return read_file(source_dir / "tests/model/data/tokenizer_corpus.txt");
}

// Samples compared with the JavaScript port: every corpus line with and without its newline,
// windows of three lines, the whole file, and edge cases written out here.
std::vector<std::string> reference_samples() {
  const std::string text = corpus();
  const auto lines = split_lines(text);
  std::vector<std::string> samples;
  for (const auto& line : lines) {
    samples.push_back(line);
    samples.push_back(line + "\n");
  }
  for (size_t i = 0; i + 2 < lines.size(); ++i)
    samples.push_back(lines[i] + "\n" + lines[i + 1] + "\n" + lines[i + 2]);
  samples.push_back(text);
  const char* edge_cases[] = {
      "",
      " ",
      "  ",
      "\n",
      "\r\n",
      "\r\n\r\n  \r\n",
      "a\r\nb\rc\n\rd",
      "\t\t\t",
      "word   \n   word",
      "trailing space ",
      "x\u3000\u3000y",
      "1",
      "12",
      "1234",
      "3.14159",
      "000000000000",
      "١٢٣٤٥",
      "一二三四五六七八九十",
      "漢字かなカナ漢字",
      "ｶﾀｶﾅ",
      "<｜User｜>",
      "<｜User｜><｜Assistant｜>",
      "a<｜User｜>b",
      " <｜User｜> ",
      "<｜begin▁of▁sentence｜><｜begin▁of▁sentence｜>",
      "<｜end▁of▁sentence｜>\n",
      "<|EOT|>",
      "<｜User",
      "｜>",
      "<<｜User｜>>",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<"
      "｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>",
      "👨‍👩‍👧‍👦👍🏽🏳️‍🌈",
      "e\u0301\u0301\u0301",
      "it's I'M we'LL they've",
      "    def f():\n\treturn 1\n",
      "!!!???...",
      "?!\n\n",
      "a.b,c;d:e",
      "Ünïcödé",
  };
  for (const char* s : edge_cases) samples.emplace_back(s);
  return samples;
}

std::string visible(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 300);
}

// -----------------------------------------------------------------------------------------------

TEST(tokenizer, loads_deepseek_v3) {
  const auto start = std::chrono::steady_clock::now();
  const tokenizer tok = tokenizer::load(tokenizer_dir);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("load: %.3f s\n", seconds);
  EXPECT_EQ(tok.vocab_size(), 128815);
  EXPECT_EQ(tok.bos_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.token_id("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(tok.token_id("<｜User｜>"), 128803);
  EXPECT_EQ(tok.token_id("<｜Assistant｜>"), 128804);
  EXPECT_EQ(tok.token_id("<|EOT|>"), 128805);
  EXPECT_EQ(tok.token_id("<｜tool▁sep｜>"), 128814);
  EXPECT_EQ(tok.token_id("Ġ"), 223);
  EXPECT_EQ(tok.token_id("no such token here"), std::nullopt);
  EXPECT_EQ(tok.token_piece(223), " ");
  EXPECT_EQ(tok.token_piece(128803), "<｜User｜>");
}

TEST(tokenizer, matches_javascript_reference) {
  const tokenizer& tok = deepseek();
  const auto samples = reference_samples();
  // The JavaScript port's \s differs from the Rust library's (it includes U+FEFF, lacks U+0085),
  // so those characters are checked against Rust-made ids in the next test instead.
  for (const auto& s : samples) {
    for (const char* odd : {"\u0085", "\ufeff", "\u180e"}) {
      ASSERT_EQ(s.find(odd), std::string::npos)
          << "sample " << visible(s) << " holds a character the JS port splits differently";
    }
  }
  json request;
  request["texts"] = samples;
  const json answer = run_reference(request);
  ASSERT_EQ(answer.at("ids").size(), samples.size());
  size_t tokens = 0;
  size_t mismatches = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto expected = answer["ids"][i].get<std::vector<int32_t>>();
    const auto ids = tok.encode(samples[i]);
    tokens += expected.size();
    if (ids != expected) {
      ++mismatches;
      ADD_FAILURE() << "sample " << i << " " << visible(samples[i])
                    << "\n  ours: " << json(ids).dump() << "\n  js:   " << json(expected).dump();
    }
  }
  std::printf("compared %zu samples, %zu tokens with the JavaScript reference: %zu mismatches\n",
              samples.size(), tokens, mismatches);
  EXPECT_GT(tokens, 10000u);
}

// Ids from the Rust library (Hugging Face tokenizers 0.23.2) where the JavaScript port's regex
// engine disagrees with it on what counts as whitespace.
TEST(tokenizer, matches_rust_library_on_unicode_whitespace) {
  const tokenizer& tok = deepseek();
  const std::pair<std::string, std::vector<int32_t>> cases[] = {
      {"(`\t \u0085\\", {28437, 35749, 129, 230, 62}},
      {"x  \u0085\\y", {90, 262, 129, 230, 62, 91}},
      {"a \u0085", {67, 1203, 230}},
      {"end \u0085\u0085", {523, 1203, 230, 129, 230}},
      {"a  \ufeffb", {67, 223, 223, 15251, 68}},
      // U+180E is whitespace to PCRE2's \s but not to Oniguruma's.
      {"x  \u180ey", {90, 223, 223, 115522, 239, 91}},
      {"Hello 世界 123456 <｜User｜>hi\u3000 x",
       {19923, 223, 3427, 223, 6895, 18009, 223, 128803, 6366, 18524, 1527}},
  };
  for (const auto& [text, expected] : cases) EXPECT_EQ(tok.encode(text), expected) << visible(text);
}

TEST(tokenizer, round_trips_corpus) {
  const tokenizer& tok = deepseek();
  const std::string text = corpus();
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  for (const auto& s : reference_samples()) {
    const auto ids = tok.encode(s);
    EXPECT_EQ(tok.decode(ids), s) << visible(s);
    // Streaming: pieces joined byte-wise give the text even where a token ends mid-character.
    std::string joined;
    for (int32_t id : ids) joined += tok.token_piece(id);
    EXPECT_EQ(joined, s) << visible(s);
  }
}

TEST(tokenizer, keeps_partial_utf8_when_decoding_alone) {
  const tokenizer& tok = deepseek();
  const std::string text = "🦜 and 龘";
  const auto ids = tok.encode(text);
  bool saw_partial = false;
  std::string joined;
  for (int32_t id : ids) {
    const std::string piece = tok.decode(std::vector<int32_t>{id});
    EXPECT_EQ(piece, tok.token_piece(id));
    const auto lead = static_cast<unsigned char>(piece.empty() ? 0 : piece[0]);
    saw_partial |= (lead & 0xC0) == 0x80 || (lead >= 0xF0 && piece.size() < 4);
    joined += piece;
  }
  EXPECT_TRUE(saw_partial) << "expected a token holding part of a character in "
                           << json(ids).dump();
  EXPECT_EQ(joined, text);
}

TEST(tokenizer, special_tokens) {
  const tokenizer& tok = deepseek();
  const auto ids = tok.encode("<｜User｜>Hi<｜Assistant｜>", true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), tok.bos_id());
  EXPECT_EQ(ids[1], 128803);
  EXPECT_EQ(ids.back(), 128804);
  EXPECT_EQ(tok.encode("Hi", true).front(), 0);
  EXPECT_EQ(tok.encode("Hi", false).front(), tok.encode("Hi", true)[1]);

  const std::vector<int32_t> with_special = {0, 128803, 19923, 128804, 19923, 1};
  EXPECT_EQ(tok.decode(with_special),
            "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜>Hello<｜end▁of▁sentence｜>");
  // <｜User｜> and <｜Assistant｜> are not flagged special in DeepSeek-V3's tokenizer.json.
  EXPECT_EQ(tok.decode(with_special, true), "<｜User｜>Hello<｜Assistant｜>Hello");
}

TEST(tokenizer, rejects_bad_ids_and_text) {
  const tokenizer& tok = deepseek();
  for (int32_t bad : {-1, 128815, 1 << 30}) {
    try {
      (void)tok.decode(std::vector<int32_t>{19923, bad});
      ADD_FAILURE() << "decode accepted id " << bad;
    } catch (const std::out_of_range& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)tok.token_piece(bad), std::out_of_range);
    // Generated text: a padded vocabulary row has no text, the rest decodes as usual.
    EXPECT_EQ(tok.decode(std::vector<int32_t>{19923, bad}, false, true),
              tok.decode(std::vector<int32_t>{19923}));
  }
  EXPECT_THROW((void)tok.encode("abc\xff"), std::invalid_argument);
  EXPECT_THROW((void)tok.encode("\xe4\xb8"), std::invalid_argument);     // truncated character
  EXPECT_THROW((void)tok.encode("\xed\xa0\x80"), std::invalid_argument); // UTF-16 surrogate
  EXPECT_THROW((void)tok.encode("\xc0\xaf"), std::invalid_argument);     // overlong '/'
}

TEST(tokenizer, encodes_from_several_threads) {
  const tokenizer& tok = deepseek();
  const auto samples = reference_samples();
  std::vector<std::vector<int32_t>> expected;
  for (const auto& s : samples) expected.push_back(tok.encode(s));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t round = 0; round < 3; ++round) {
        for (size_t i = t; i < samples.size(); i += 1 + t % 2) {
          if (tok.encode(samples[i]) != expected[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(tokenizer, encodes_a_megabyte_quickly) {
  const tokenizer& tok = deepseek();
  const std::string base = corpus();
  std::string text;
  // Vary the words so the word cache does not do all the work.
  for (int i = 0; text.size() < (1u << 20); ++i)
    text += base + " v" + std::to_string(i * 7919) + "x\n";
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("encode: %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", text.size(), ids.size(),
              seconds, text.size() / seconds / 1e6);
  EXPECT_EQ(tok.decode(ids), text);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(seconds, 2.0); // generous: the machine is shared; ~0.05 s is typical
#endif
}

// -----------------------------------------------------------------------------------------------
// Malformed files: the error names the file and the problem.

struct bad_tokenizer_dir : temp_dir {
  bad_tokenizer_dir() : temp_dir("badtok") {
    fs::copy_file(tokenizer_dir / "tokenizer_config.json", path / "tokenizer_config.json");
  }
  fs::path json_path() const { return path / "tokenizer.json"; }
};

std::string load_error(const fs::path& dir) {
  try {
    (void)tokenizer::load(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(tokenizer, reports_truncated_file) {
  bad_tokenizer_dir dir;
  const std::string full = read_file(tokenizer_dir / "tokenizer.json");
  write_file(dir.json_path(), full.substr(0, full.size() / 2));
  const std::string error = load_error(dir.path);
  EXPECT_NE(error.find(dir.json_path().string()), std::string::npos) << error;
  EXPECT_NE(error.find("invalid JSON"), std::string::npos) << error;
}

TEST(tokenizer, reports_missing_model) {
  bad_tokenizer_dir dir;
  json root = json::parse(read_file(tokenizer_dir / "tokenizer.json"));
  root.erase("model");
  write_file(dir.json_path(), root.dump());
  const std::string error = load_error(dir.path);
  EXPECT_NE(error.find(dir.json_path().string()), std::string::npos) << error;
  EXPECT_NE(error.find("\"model\""), std::string::npos) << error;
}

// A small byte-level BPE tokenizer in the same format, quick to write and load many times.
json tiny_tokenizer_json() {
  json vocab = json::object();
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const unsigned c = printable ? b : 256 + extra++;
    std::string symbol;
    if (c < 0x80) {
      symbol += static_cast<char>(c);
    } else {
      symbol += static_cast<char>(0xC0 | (c >> 6));
      symbol += static_cast<char>(0x80 | (c & 0x3F));
    }
    vocab[symbol] = b;
  }
  vocab["Ġt"] = 256;
  vocab["he"] = 257;
  vocab["Ġthe"] = 258;
  return {
      {"version", "1.0"},
      {"added_tokens",
       json::array(
           {{{"id", 259}, {"content", "<eos>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"},
               {"pattern", {{"Regex", "\\p{N}{1,3}"}}},
               {"behavior", "Isolated"}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}})}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"Ġ t", "h e", "Ġt he"})}}},
  };
}

struct tiny_tokenizer_dir : temp_dir {
  explicit tiny_tokenizer_dir(const json& tokenizer_json) : temp_dir("tinytok") {
    write_file(path / "tokenizer.json", tokenizer_json.dump());
    write_file(path / "tokenizer_config.json",
               R"({"bos_token": "<eos>", "eos_token": {"content": "<eos>"}})");
  }
};

TEST(tokenizer, loads_a_small_tokenizer) {
  tiny_tokenizer_dir dir(tiny_tokenizer_json());
  const tokenizer tok = tokenizer::load(dir.path);
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_EQ(tok.bos_id(), 259);
  EXPECT_EQ(tok.eos_id(), 259);
  EXPECT_EQ(tok.encode(" the"), std::vector<int32_t>({258}));
  EXPECT_EQ(tok.encode("the 12345<eos>", true),
            std::vector<int32_t>({259, 't', 257, ' ', '1', '2', '3', '4', '5', 259}));
  EXPECT_EQ(tok.decode(tok.encode("the 12345<eos> ü")), "the 12345<eos> ü");
}

TEST(tokenizer, reports_unsupported_components) {
  const json base = tiny_tokenizer_json();
  const std::pair<std::function<void(json&)>, std::string> edits[] = {
      {[](json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "NFKC"},
      {[](json& j) {
         j["normalizer"]["normalizers"].push_back({{"type", "Lowercase"}});
       },
       "Lowercase"},
      {[](json& j) {
         j["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Digits"}});
       },
       "Digits"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
       "regex"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; },
       "Sideways"},
      {[](json& j) { j["pre_tokenizer"] = nullptr; }, "ByteLevel"},
      {[](json& j) { j["model"]["type"] = "Unigram"; }, "Unigram"},
      {[](json& j) { j["model"]["merges"][1] = "h e x"; }, "model.merges[1]"},
      {[](json& j) { j["model"]["merges"][2] = "notatoken alsonot"; }, "model.merges[2]"},
      {[](json& j) { j["model"]["vocab"] = json::array(); }, "model.vocab"},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {[](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "WordPiece"},
      {[](json& j) { j["added_tokens"][0]["content"] = 5; }, "added_tokens[0]"},
  };
  for (const auto& [edit, expected] : edits) {
    json root = base;
    edit(root);
    tiny_tokenizer_dir dir(root);
    const std::string error = load_error(dir.path);
    EXPECT_NE(error.find((dir.path / "tokenizer.json").string()), std::string::npos) << error;
    EXPECT_NE(error.find(expected), std::string::npos)
        << "expected \"" << expected << "\" in: " << error;
  }
}

TEST(tokenizer, accepts_merges_as_pairs) {
  bad_tokenizer_dir dir;
  json root = json::parse(read_file(tokenizer_dir / "tokenizer.json"));
  for (auto& m : root["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    m = json::array({s.substr(0, space), s.substr(space + 1)});
  }
  write_file(dir.json_path(), root.dump());
  const tokenizer tok = tokenizer::load(dir.path);
  const std::string text = corpus();
  EXPECT_EQ(tok.encode(text), deepseek().encode(text));
}

TEST(tokenizer, reports_missing_files) {
  temp_dir empty("notok");
  std::string error = load_error(empty.path);
  EXPECT_NE(error.find((empty.path / "tokenizer.json").string()), std::string::npos) << error;

  bad_tokenizer_dir dir;
  fs::copy_file(tokenizer_dir / "tokenizer.json", dir.json_path());
  write_file(dir.path / "tokenizer_config.json", R"({"eos_token": "<｜end▁of▁sentence｜>"})");
  error = load_error(dir.path);
  EXPECT_NE(error.find((dir.path / "tokenizer_config.json").string()), std::string::npos) << error;
  EXPECT_NE(error.find("bos_token"), std::string::npos) << error;
}

// -----------------------------------------------------------------------------------------------
// Chat template.

const std::vector<chat_message> conversation = {
    {"system", "You are a helpful assistant."},
    {"user", "What is 2+2?"},
    {"assistant", "2+2 equals 4."},
    {"system", "Answer briefly."},
    {"user", "And 3+3? 日本語で。"},
};

TEST(chat_template, renders_conversation) {
  const std::string bos = "<｜begin▁of▁sentence｜>";
  EXPECT_EQ(apply_chat_template(conversation, true, bos),
            "<｜begin▁of▁sentence｜>You are a helpful assistant.\n\nAnswer briefly."
            "<｜User｜>What is 2+2?<｜Assistant｜>2+2 equals 4.<｜end▁of▁sentence｜>"
            "<｜User｜>And 3+3? 日本語で。<｜Assistant｜>");
  EXPECT_EQ(apply_chat_template({{"user", "hi"}}, false, bos),
            "<｜begin▁of▁sentence｜><｜User｜>hi");
  EXPECT_EQ(apply_chat_template({}, true, ""), "<｜Assistant｜>");
}

TEST(chat_template, matches_javascript_reference) {
  std::vector<std::pair<std::vector<chat_message>, bool>> chats = {
      {conversation, true},
      {conversation, false},
      {{{"user", "hi"}}, true},
      {{{"system", "S1"}, {"system", "S2"}, {"user", "u"}, {"assistant", "a"}}, false},
      {{{"assistant", "first"}, {"user", "<｜User｜> inside"}}, true},
      {{}, true},
  };
  json request;
  request["chats"] = json::array();
  for (const auto& [messages, generation_prompt] : chats) {
    json m = json::array();
    for (const auto& msg : messages) m.push_back({{"role", msg.role}, {"content", msg.content}});
    request["chats"].push_back({{"messages", m}, {"add_generation_prompt", generation_prompt}});
  }
  const json answer = run_reference(request);
  ASSERT_EQ(answer.at("chats").size(), chats.size());
  const tokenizer& tok = deepseek();
  const std::string bos = tok.token_piece(tok.bos_id());
  for (size_t i = 0; i < chats.size(); ++i) {
    EXPECT_EQ(apply_chat_template(chats[i].first, chats[i].second, bos),
              answer["chats"][i].get<std::string>())
        << "chat " << i;
  }
}

TEST(chat_template, rejects_unsupported_roles) {
  for (const char* role : {"tool", "function", "developer", ""}) {
    try {
      (void)apply_chat_template({{"user", "x"}, {role, "y"}}, true, "");
      ADD_FAILURE() << "accepted role " << role;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("\"" + std::string(role) + "\""), std::string::npos)
          << e.what();
    }
  }
}

TEST(chat_template, parses_openai_messages) {
  const json ok = json::parse(
      R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u", "name": "x"},
                                  {"role": "assistant", "content": "a", "tool_calls": []}])");
  const auto messages = parse_chat_messages(ok);
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[1].role, "user");
  EXPECT_EQ(messages[1].content, "u");

  const std::pair<const char*, const char*> bad[] = {
      {R"({"role": "user", "content": "u"})", "array"},
      {R"([{"content": "u"}])", "role"},
      {R"([{"role": 3, "content": "u"}])", "role"},
      {R"([{"role": "user"}])", "content"},
      {R"([{"role": "user", "content": null}])", "content"},
      {R"([{"role": "user", "content": [{"type": "text", "text": "u"}]}])", "content"},
      {R"([{"role": "user", "content": "u"}, {"role": "tool", "content": "r"}])", "\"tool\""},
      {R"([{"role": "assistant", "content": null, "tool_calls": [{"type": "function"}]}])",
       "tool_calls"},
      {R"(["user"])", "object"},
  };
  for (const auto& [text, expected] : bad) {
    try {
      (void)parse_chat_messages(json::parse(text));
      ADD_FAILURE() << "accepted " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

} // namespace
} // namespace supernode::model
