#include "services/gateway/stop_matcher.hpp"

#include <gtest/gtest.h>
#include <random>

using supernode::services::gateway::text_stream;

namespace {

// Feeds `pieces` and finishes; returns what was emitted, checking on the way that every piece
// returned is valid by construction (complete characters) and that text() keeps the sum.
std::string run(text_stream& s, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += s.feed(p);
  out += s.finish();
  EXPECT_EQ(out, s.text());
  return out;
}

// Every byte on its own: the hardest split.
std::vector<std::string> bytes_of(std::string_view text) {
  std::vector<std::string> out;
  for (char c : text) out.emplace_back(1, c);
  return out;
}

// The reference: the full text cut at its first stop string.
std::string cut_at_first_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const auto& s : stops) first = std::min(first, text.find(s));
  return first == std::string::npos ? text : text.substr(0, first);
}

} // namespace

TEST(text_stream, no_stops_passes_text_through) {
  text_stream s({});
  EXPECT_EQ(s.feed("Hello"), "Hello");
  EXPECT_EQ(s.feed(", world"), ", world");
  EXPECT_EQ(s.finish(), "");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.text(), "Hello, world");
}

TEST(text_stream, multibyte_characters_split_across_pieces_wait_until_whole) {
  text_stream s({});
  const std::string ni = "\xE4\xBD\xA0"; // 你
  EXPECT_EQ(s.feed("a\xE4"), "a");
  EXPECT_EQ(s.feed("\xBD"), "");
  EXPECT_EQ(s.feed("\xA0"
                   "b"),
            ni + "b");
  const std::string emoji = "\xF0\x9F\x98\x80"; // 😀
  EXPECT_EQ(s.feed(emoji.substr(0, 1)), "");
  EXPECT_EQ(s.feed(emoji.substr(1, 2)), "");
  EXPECT_EQ(s.feed(emoji.substr(3)), emoji);
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.text(), "a" + ni + "b" + emoji);
}

TEST(text_stream, incomplete_tail_at_the_end_becomes_a_replacement_character) {
  text_stream s({});
  EXPECT_EQ(s.feed("x\xE4\xBD"), "x");
  EXPECT_EQ(s.finish(), "\xEF\xBF\xBD"); // one U+FFFD for the cut-off character
  EXPECT_EQ(s.finish(), "");
}

TEST(text_stream, invalid_bytes_are_replaced_not_held) {
  text_stream s({});
  EXPECT_EQ(s.feed("a\xFF"
                   "b\xC0\x80"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(text_stream, stop_string_is_cut_and_not_returned) {
  text_stream s({"END"});
  EXPECT_EQ(s.feed("Hello "), "Hello ");
  EXPECT_EQ(s.feed("wEND and more"), "w");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.feed("more"), "");
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.text(), "Hello w");
}

TEST(text_stream, stop_spanning_pieces_is_held_then_cut) {
  text_stream s({"\n\nUser:"});
  EXPECT_EQ(s.feed("Sure.\n"), "Sure.");
  EXPECT_EQ(s.feed("\nUs"), "");
  EXPECT_EQ(s.feed("er:"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.text(), "Sure.");
}

TEST(text_stream, a_false_start_is_released) {
  text_stream s({"STOP"});
  EXPECT_EQ(s.feed("ST"), "");
  EXPECT_EQ(s.feed("OMP"), "STOMP");
  EXPECT_EQ(s.feed("STO"), "");
  EXPECT_EQ(s.finish(), "STO");
  EXPECT_FALSE(s.stopped());
}

TEST(text_stream, overlapping_candidates_cut_at_the_earliest_stop) {
  // "abcd" starts earlier than "bc" would be found in a later piece; "bcx" never completes.
  const std::vector<std::string> stops = {"bcx", "abcd", "cd"};
  text_stream s(stops);
  EXPECT_EQ(run(s, {"xxab", "c", "d!"}), "xx");
  EXPECT_TRUE(s.stopped());
  // The held prefix "aa" of "aab" shifts by one when the text goes on "aaab".
  text_stream t({"aab"});
  EXPECT_EQ(run(t, {"a", "a", "a", "b", "c"}), "a");
  EXPECT_TRUE(t.stopped());
}

TEST(text_stream, multibyte_stop_strings) {
  const std::string stop = "\xE3\x80\x82"; // 。
  text_stream s({stop});
  EXPECT_EQ(run(s, bytes_of("\xE4\xBD\xA0\xE5\xA5\xBD" + stop + "\xE5\x90\x97")),
            "\xE4\xBD\xA0\xE5\xA5\xBD");
  EXPECT_TRUE(s.stopped());
}

TEST(text_stream, empty_stop_strings_are_ignored) {
  text_stream s({"", "zz"});
  EXPECT_EQ(run(s, {"abc"}), "abc");
}

TEST(text_stream, any_split_equals_the_text_cut_at_the_first_stop) {
  // Random texts over a small alphabet (with multi-byte characters) so that stops and their
  // prefixes occur often, split at random byte positions.
  const std::vector<std::string> alphabet = {
      "a", "b", "\n", "\xC3\xA9", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80"};
  const std::vector<std::vector<std::string>> stop_sets = {{},
                                                           {"ab"},
                                                           {"b\n", "aa"},
                                                           {"\xE4\xBD\xA0"
                                                            "a"},
                                                           {"aab", "ab\n", "\n\n"},
                                                           {"a\xC3\xA9"
                                                            "b"}};
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int chars = static_cast<int>(rng() % 24);
    for (int i = 0; i < chars; ++i) text += alphabet[rng() % alphabet.size()];
    const auto& stops = stop_sets[round % stop_sets.size()];
    std::vector<std::string> pieces;
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::min<size_t>(1 + rng() % 5, text.size() - at);
      pieces.push_back(text.substr(at, len));
      at += len;
    }
    text_stream s(stops);
    const std::string expected = cut_at_first_stop(text, stops);
    ASSERT_EQ(run(s, pieces), expected) << "round " << round;
    EXPECT_EQ(s.stopped(), expected.size() != text.size()) << "round " << round;
  }
}
