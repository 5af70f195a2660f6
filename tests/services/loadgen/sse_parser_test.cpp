#include "services/loadgen/sse_parser.hpp"

#include <gtest/gtest.h>

namespace lg = supernode::services::loadgen;

namespace {

const std::string three_events = "data: {\"n\":1}\n\n"
                                 ": keep-alive comment\n"
                                 "\n"
                                 "event: note\ndata: first line\ndata:second line\n\n"
                                 "data: [DONE]\n\n";

std::vector<std::string> data_of(const std::vector<lg::sse_event>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.data);
  return out;
}

const std::vector<std::string> expected_data{"{\"n\":1}", "first line\nsecond line", "[DONE]"};

std::vector<lg::sse_event> parse_in_pieces(const std::string& text, std::vector<size_t> cuts) {
  lg::sse_parser parser;
  std::vector<lg::sse_event> events;
  size_t from = 0;
  cuts.push_back(text.size());
  for (size_t cut : cuts) {
    parser.feed(std::string_view(text).substr(from, cut - from), events);
    from = cut;
  }
  return events;
}

std::string with_line_endings(std::string text, const std::string& ending) {
  std::string out;
  for (char c : text) out += c == '\n' ? ending : std::string(1, c);
  return out;
}

} // namespace

TEST(loadgen_sse_parser, several_events_in_one_read) {
  const auto events = parse_in_pieces(three_events, {});
  EXPECT_EQ(data_of(events), expected_data);
  EXPECT_EQ(events[1].event, "note");
  EXPECT_EQ(events[0].event, "");
}

TEST(loadgen_sse_parser, split_at_every_byte_boundary) {
  for (const char* ending : {"\n", "\r\n", "\r"}) {
    const auto text = with_line_endings(three_events, ending);
    for (size_t cut = 0; cut <= text.size(); ++cut)
      EXPECT_EQ(data_of(parse_in_pieces(text, {cut})), expected_data)
          << "cut at " << cut << " with ending " << static_cast<int>(ending[0]);
  }
}

TEST(loadgen_sse_parser, one_byte_per_read) {
  const auto text = with_line_endings(three_events, "\r\n");
  std::vector<size_t> cuts;
  for (size_t i = 1; i < text.size(); ++i) cuts.push_back(i);
  EXPECT_EQ(data_of(parse_in_pieces(text, cuts)), expected_data);
}

TEST(loadgen_sse_parser, crlf_split_between_reads_is_one_line_ending) {
  // Were the "\n" after a read ending in "\r" taken as a second, blank line, it would end the
  // event early and split "a" and "b" into two events.
  const auto events = parse_in_pieces("data: a\r\ndata: b\r\n\r\n", {8});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "a\nb");
}

TEST(loadgen_sse_parser, comments_and_blank_lines_make_no_event) {
  const auto events = parse_in_pieces("\n\n: ping\n\n:\n\nid: 7\nretry: 10\n\n", {});
  EXPECT_TRUE(events.empty());
  // An unfinished event is not dispatched until its blank line arrives.
  EXPECT_TRUE(parse_in_pieces("data: half", {}).empty());
  // A field without a colon is a field name with an empty value; "data" alone is an empty data.
  const auto empty = parse_in_pieces("data\n\n", {});
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].data, "");
}
