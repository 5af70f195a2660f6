#include "model/tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdexcept>
#include <string>

namespace supernode::model::detail {
namespace {

// The Unicode White_Space set of is_white_space (utf8.hpp) as the body of a PCRE2 class.
constexpr std::string_view white_space_class_body =
    "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}"
    "\\x{3000}";

// tokenizer.json patterns are written for Oniguruma; PCRE2 with UTF+UCP agrees with it on
// everything these patterns use except the meaning of \s (PCRE2 adds U+180E) and \h (a hex
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

} // namespace

regex::regex(std::string_view pattern, bool literal, const std::filesystem::path& file) {
  const std::string translated = literal ? std::string(pattern) : onig_to_pcre2(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                            options, &error, &offset, nullptr));
  if (!code_) {
    throw std::runtime_error(file.string() + ": " + "cannot compile pre-tokenizer regex \"" +
                             std::string(pattern) + "\" at offset " + std::to_string(offset) +
                             ": " + pcre2_message(error));
  }
  // Without JIT (unsupported platform) the interpreter gives the same matches, only slower.
  pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);
}

regex::~regex() = default;

void regex::code_free_fn::operator()(pcre2_real_code_8* c) const {
  pcre2_code_free(c);
}

bool regex::find(std::string_view subject, size_t pos, size_t& begin, size_t& end) const {
  match_scratch& scratch = thread_scratch();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = pcre2_match(code_.get(), data, subject.size(), pos, PCRE2_NO_UTF_CHECK,
                             scratch.data, scratch.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) throw std::runtime_error("tokenizer: regex match failed: " + pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
  begin = ovector[0];
  end = ovector[1];
  return true;
}

} // namespace supernode::model::detail
