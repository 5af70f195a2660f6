#pragma once
// Pre-tokenizer regexes: Oniguruma patterns from tokenizer.json run with PCRE2 (JIT when
// available), matched the way Oniguruma's find_iter (and so Hugging Face) steps through text.

#include "model/tokenizer/utf8.hpp"

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string_view>

struct pcre2_real_code_8; // pcre2_code with PCRE2_CODE_UNIT_WIDTH 8

namespace supernode::model::detail {

class regex {
public:
  // A literal pattern matches its text as is; otherwise pattern is Oniguruma syntax. Throws
  // std::runtime_error naming file when the pattern does not compile.
  regex(std::string_view pattern, bool literal, const std::filesystem::path& file);
  ~regex();
  regex(const regex&) = delete;
  regex& operator=(const regex&) = delete;

  // Calls fn(begin, end) for each match in subject, stepping over an empty match that touches
  // the previous one as Oniguruma's find_iter (and so Hugging Face) does. Safe to call from
  // several threads at once.
  template<class Fn>
  void for_each_match(std::string_view subject, Fn&& fn) const {
    const size_t n = subject.size();
    size_t pos = 0;
    size_t last_end = std::string_view::npos;
    while (pos <= n) {
      size_t begin = 0;
      size_t end = 0;
      if (!find(subject, pos, begin, end)) return;
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
  // The first match starting at or after pos, or false when there is none.
  bool find(std::string_view subject, size_t pos, size_t& begin, size_t& end) const;

  struct code_free_fn {
    void operator()(pcre2_real_code_8* c) const;
  };
  std::unique_ptr<pcre2_real_code_8, code_free_fn> code_;
};

} // namespace supernode::model::detail
