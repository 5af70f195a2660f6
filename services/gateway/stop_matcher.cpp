#include "services/gateway/stop_matcher.hpp"

#include <algorithm>

namespace supernode::services::gateway {

namespace {

constexpr std::string_view replacement_character = "\xEF\xBF\xBD"; // U+FFFD

// The well-formed UTF-8 sequence starting at s[i] (Unicode table 3-7: no overlongs, surrogates
// or code points past U+10FFFF) is `length` bytes long when `complete`. Otherwise `length` is the
// maximal subpart to replace by one U+FFFD (Unicode's recommended practice), and `truncated`
// says those bytes are a valid start that only the end of s cut off.
struct sequence {
  size_t length = 1;
  bool complete = true;
  bool truncated = false;
};

sequence sequence_at(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return {1, true, false};
  size_t len = 0;
  unsigned char low = 0x80, high = 0xBF; // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return {1, false, false};
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return {k, false, true};
    const unsigned char c = byte(i + k);
    const bool ok = k == 1 ? (c >= low && c <= high) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return {k, false, false};
  }
  return {len, true, false};
}

// Where a trailing, still completable UTF-8 sequence starts in s (s.size() if there is none):
// those bytes must wait for the next piece.
size_t complete_prefix_length(std::string_view s) {
  const size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = from; i < s.size(); ++i) {
    if (sequence_at(s, i).truncated) return i;
  }
  return s.size();
}

// s with every ill-formed subsequence (a cut-off tail included) replaced by U+FFFD.
std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const sequence seq = sequence_at(s, i);
    if (seq.complete)
      out.append(s.substr(i, seq.length));
    else
      out += replacement_character;
    i += seq.length;
  }
  return out;
}

} // namespace

text_stream::text_stream(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string text_stream::feed(std::string_view piece) {
  if (stopped_ || finished_) return "";
  held_.append(piece);

  // Everything before held_ has been checked to hold no stop string and to end in no stop
  // prefix, so the first match lies entirely inside held_.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = emit(std::string_view(held_).substr(0, first));
    held_.clear();
    return out;
  }

  size_t safe = held_.size() - stop_prefix_suffix_length();
  safe = complete_prefix_length(std::string_view(held_).substr(0, safe));
  std::string out = emit(std::string_view(held_).substr(0, safe));
  held_.erase(0, safe);
  return out;
}

std::string text_stream::finish() {
  if (stopped_ || finished_) return "";
  finished_ = true;
  std::string out = emit(held_);
  held_.clear();
  return out;
}

std::string text_stream::emit(std::string_view bytes) {
  std::string out = sanitize(bytes);
  emitted_ += out;
  return out;
}

// The longest tail of held_ that is a proper prefix of some stop string: it may still grow into
// that stop string, so it cannot leave yet.
size_t text_stream::stop_prefix_suffix_length() const {
  size_t longest = 0;
  const std::string_view held(held_);
  for (const std::string& stop : stops_) {
    for (size_t len = std::min(stop.size() - 1, held.size()); len > longest; --len) {
      if (held.substr(held.size() - len) == std::string_view(stop).substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

} // namespace supernode::services::gateway
