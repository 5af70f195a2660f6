#include "model/tokenizer/pretokenizer.hpp"

#include <algorithm>
#include <string>

namespace supernode::model::detail {
namespace {

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

} // namespace

void pre_tokenize(const std::vector<split_step>& splits, const byte_level_step& byte_level_pre,
                  std::string_view text, std::vector<piece>& out) {
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

} // namespace supernode::model::detail
