// The gateway's request tracker without sockets or a cluster: a fake exchange records what the
// client would see, and when. A client that reads the end of one request and sends the next at
// once must find the first one's slot given back (with max_pending = 1 it would get a 429).
// Tokens count only from the decode instance a request is placed on.

#include "services/gateway/request_tracker.hpp"

#include <future>
#include <gtest/gtest.h>

using namespace supernode;
using namespace supernode::services;
using namespace supernode::services::gateway;

namespace {

// Records the tracker's in-flight count at the moment the client's answer ends.
class recording_exchange : public http_exchange {
public:
  explicit recording_exchange(const request_tracker& t) : tracker_(t) {}
  void respond(unsigned status, std::string, std::string text) override {
    body = std::move(text);
    end(status);
  }
  void send_event(std::string) override {}
  void end_stream() override { end(200); }
  void set_disconnect_handler(std::function<void()>) override {}
  bool finished() const override { return ended_; }

  std::future<size_t> in_flight_at_end() { return at_end_.get_future(); }
  unsigned status = 0;
  std::string body;

private:
  void end(unsigned s) {
    status = s;
    ended_ = true;
    at_end_.set_value(tracker_.in_flight());
  }
  const request_tracker& tracker_;
  bool ended_ = false;
  std::promise<size_t> at_end_;
};

struct tracker_under_test {
  metrics_registry metrics;
  request_tracker tracker{
      metrics, 1,
      request_tracker::upstream{
          [](const protocol::admit_request&) { return transport::send_status::ok; },
          [](const tracked_request&, const std::string&) {},
          [](int32_t token) { return std::to_string(token); },
          [this](const std::string& from, const std::string& reason, const std::string&) {
            rejected.emplace_back(from, reason);
          }}};
  std::vector<std::pair<std::string, std::string>> rejected; // on the tracker's thread

  // A reserved, admitted request with id `id`; its exchange records the end.
  std::shared_ptr<recording_exchange> start(uint64_t id, bool stream) {
    EXPECT_TRUE(tracker.reserve());
    auto ex = std::make_shared<recording_exchange>(tracker);
    auto r = std::make_shared<tracked_request>();
    r->id = id;
    r->api.stream = stream;
    r->ex = ex;
    r->text = std::make_unique<text_stream>(std::vector<std::string>{});
    protocol::admit_request message;
    message.key = {"gateway-0", id};
    tracker.admit(r, message);
    tracker.placed({message.key, "prefill-0", "decode-0"});
    return ex;
  }
  void send(uint64_t id, std::vector<int32_t> tokens, protocol::finish_reason finish,
            protocol::error failure = {}, const std::string& from = "decode-0") {
    auto batch = std::make_shared<protocol::token_batch>();
    batch->updates.push_back({{"gateway-0", id}, std::move(tokens), finish, std::move(failure)});
    tracker.tokens(from, batch);
  }
};

} // namespace

TEST(request_tracker, the_slot_is_free_before_the_client_sees_the_end) {
  for (bool stream : {false, true}) {
    tracker_under_test t;
    auto ex = t.start(1, stream);
    auto at_end = ex->in_flight_at_end();
    t.send(1, {5, 6}, protocol::finish_reason::length);
    EXPECT_EQ(at_end.get(), 0u) << (stream ? "stream" : "whole");
    EXPECT_EQ(ex->status, 200u);
    EXPECT_TRUE(t.tracker.reserve()) << "the next request finds the slot taken";
  }
}

TEST(request_tracker, a_failed_request_frees_its_slot_before_the_error_reaches_the_client) {
  tracker_under_test t;
  auto ex = t.start(1, false);
  auto at_end = ex->in_flight_at_end();
  t.send(1, {}, protocol::finish_reason::error,
         {protocol::serving_errc::kv_exhausted, "out of KV blocks"});
  EXPECT_EQ(at_end.get(), 0u);
  EXPECT_GE(ex->status, 400u);
  EXPECT_TRUE(t.tracker.reserve());
}

TEST(request_tracker, tokens_from_another_instance_are_rejected_and_change_nothing) {
  tracker_under_test t;
  auto ex = t.start(1, false);
  auto at_end = ex->in_flight_at_end();
  // A forged batch: three tokens and an early end, from an instance the request is not on.
  t.send(1, {7, 7, 7}, protocol::finish_reason::stop, {}, "decode-1");
  t.send(1, {5, 6}, protocol::finish_reason::length);
  EXPECT_EQ(at_end.get(), 0u);
  EXPECT_EQ(ex->status, 200u);
  EXPECT_NE(ex->body.find("\"completion_tokens\":2"), std::string::npos) << ex->body;
  EXPECT_NE(ex->body.find("\"text\":\"56\""), std::string::npos) << ex->body;
  ASSERT_EQ(t.rejected.size(), 1u);
  EXPECT_EQ(t.rejected[0],
            std::make_pair(std::string("decode-1"), std::string("not_from_placed_decode")));
}

TEST(request_tracker, updates_before_the_placement_wait_for_it_then_count_only_from_its_decode) {
  tracker_under_test t;
  EXPECT_TRUE(t.tracker.reserve());
  auto ex = std::make_shared<recording_exchange>(t.tracker);
  auto r = std::make_shared<tracked_request>();
  r->id = 9;
  r->ex = ex;
  r->text = std::make_unique<text_stream>(std::vector<std::string>{});
  protocol::admit_request message;
  message.key = {"gateway-0", 9};
  t.tracker.admit(r, message);
  auto at_end = ex->in_flight_at_end();
  t.send(9, {1}, protocol::finish_reason::none, {}, "decode-1");      // forged, early
  t.send(9, {2, 3}, protocol::finish_reason::length, {}, "decode-0"); // real, early
  t.tracker.placed({message.key, "prefill-0", "decode-0"});
  EXPECT_EQ(at_end.get(), 0u);
  EXPECT_EQ(ex->status, 200u);
  EXPECT_NE(ex->body.find("\"completion_tokens\":2"), std::string::npos) << ex->body;
  ASSERT_EQ(t.rejected.size(), 1u);
  EXPECT_EQ(t.rejected[0].first, "decode-1");
}
