#include "services/loadgen/completion_stream.hpp"

#include <gtest/gtest.h>

namespace lg = supernode::services::loadgen;

namespace {

std::string token_event(const std::string& text, const char* finish = "null") {
  return "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
         "\"choices\":[{\"index\":0,\"text\":\"" +
         text + "\",\"logprobs\":null,\"finish_reason\":" + finish + "}],\"usage\":null}\n\n";
}

std::string usage_event(int completion_tokens) {
  return "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
         "\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":" +
         std::to_string(completion_tokens) +
         ",\"total_tokens\":" + std::to_string(5 + completion_tokens) + "}}\n\n";
}

const std::string done_event = "data: [DONE]\n\n";

} // namespace

TEST(loadgen_completion_stream, counts_token_events_and_reads_usage) {
  lg::completion_stream s;
  // An empty piece (a token that detokenizes to nothing yet) is still a token.
  s.feed(token_event("Hel") + token_event(""), 1.0);
  s.feed(token_event("lo", "\"length\""), 2.0);
  EXPECT_EQ(s.completion_tokens(), 3); // no usage yet: the event count
  s.feed(usage_event(4) + done_event, 3.0);
  EXPECT_TRUE(s.done());
  EXPECT_FALSE(s.failed());
  EXPECT_EQ(s.completion_tokens(), 4); // the server's own count wins
  EXPECT_EQ(s.usage_prompt_tokens(), 5);
  EXPECT_EQ(s.token_times_s(), (std::vector<double>{1.0, 1.0, 2.0}));
  s.finish();
  EXPECT_FALSE(s.failed());
}

TEST(loadgen_completion_stream, an_event_is_stamped_when_its_last_byte_arrives) {
  lg::completion_stream s;
  const auto ev = token_event("x");
  s.feed(ev.substr(0, 10), 1.0);
  s.feed(ev.substr(10), 2.5);
  s.feed(done_event, 3.0);
  EXPECT_EQ(s.token_times_s(), std::vector<double>{2.5});
  EXPECT_EQ(s.completion_tokens(), 1);
}

TEST(loadgen_completion_stream, failures_carry_their_reason) {
  {
    lg::completion_stream s;
    s.feed("data: {not json\n\n", 1.0);
    ASSERT_TRUE(s.failed());
    EXPECT_NE(s.error()->find("malformed stream event"), std::string::npos);
  }
  {
    lg::completion_stream s;
    s.feed(token_event("a") +
               "data: {\"error\":{\"message\":\"engine died\",\"type\":\"internal\"}}\n\n",
           1.0);
    ASSERT_TRUE(s.failed());
    EXPECT_EQ(*s.error(), "error event: engine died");
  }
  {
    lg::completion_stream s;
    s.feed("data: {\"object\":\"text_completion\"}\n\n", 1.0);
    EXPECT_TRUE(s.failed());
  }
  {
    lg::completion_stream s;
    s.feed(token_event("a"), 1.0);
    s.finish();
    ASSERT_TRUE(s.failed());
    EXPECT_EQ(*s.error(), "stream ended before data: [DONE]");
  }
}

TEST(loadgen_completion_stream, nothing_after_done_counts) {
  lg::completion_stream s;
  s.feed(token_event("a") + done_event + token_event("b") + "data: garbage\n\n", 1.0);
  EXPECT_TRUE(s.done());
  EXPECT_FALSE(s.failed());
  EXPECT_EQ(s.completion_tokens(), 1);
}

TEST(loadgen_completion_stream, collects_each_chunks_token_ids_in_order) {
  auto with_ids = [](const std::string& ids) {
    return "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"token_ids\":" + ids + "}]}\n\n";
  };
  lg::completion_stream s;
  s.feed(with_ids("[11]") + with_ids("[12, 13]"), 1.0);
  s.feed(with_ids("[14]") + done_event, 2.0);
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.token_ids(), (std::vector<int32_t>{11, 12, 13, 14}));

  lg::completion_stream bad;
  bad.feed(with_ids("\"11\""), 1.0);
  ASSERT_TRUE(bad.failed());
  EXPECT_NE(bad.error()->find("token_ids is not an array"), std::string::npos) << *bad.error();
  lg::completion_stream not_integers;
  not_integers.feed(with_ids("[1.5]"), 1.0);
  EXPECT_TRUE(not_integers.failed());
}
