// The gateway's request tracker without sockets or a cluster: a fake exchange records what the
// client would see, and when. A client that reads the end of one request and sends the next at
// once must find the first one's slot given back (with max_pending = 1 it would get a 429).
// Tokens count only from the decode instance a request is placed on. A request whose instance
// goes down is admitted again under a fresh id with the tokens its client has, and the client
// sees one stream: each token index once, whatever the old and new attempts send.

#include "../../support/eventually.hpp"
#include "services/gateway/request_tracker.hpp"

#include <future>
#include <gtest/gtest.h>
#include <mutex>

using namespace supernode;
using namespace supernode::services;
using namespace supernode::services::gateway;

namespace {

// Records the tracker's in-flight count at the moment the client's answer ends.
class recording_exchange : public http_exchange {
public:
  explicit recording_exchange(const request_tracker& t) : tracker_(t) {}
  void respond(unsigned status, std::string type, std::string text) override {
    respond(status, std::move(type), std::move(text), {});
  }
  void respond(unsigned status, std::string, std::string text, const header_fields&) override {
    body = std::move(text);
    end(status);
  }
  void send_event(std::string event) override {
    std::lock_guard lock(mutex);
    events.push_back(std::move(event));
  }
  void end_stream() override { end(200); }
  void set_disconnect_handler(std::function<void()>) override {}
  bool finished() const override { return ended_; }

  std::future<size_t> in_flight_at_end() { return at_end_.get_future(); }
  unsigned status = 0;
  std::string body;
  std::mutex mutex;
  std::vector<std::string> events;

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
  explicit tracker_under_test(std::chrono::milliseconds recovery = std::chrono::seconds(30),
                              std::chrono::milliseconds stall = std::chrono::seconds(15),
                              std::chrono::milliseconds first_token = std::chrono::seconds(60))
      : tracker{metrics,
                1,
                request_tracker::upstream{
                    [this](const protocol::admit_request& m) {
                      std::lock_guard lock(mutex);
                      admissions.push_back(m);
                      return transport::send_status::ok;
                    },
                    [this](const tracked_request& r, const std::string&) {
                      std::lock_guard lock(mutex);
                      cancels.emplace_back(r.decode, r.cluster_id);
                    },
                    [](int32_t token) { return std::to_string(token); },
                    [this](const std::string& from, const std::string& reason, const std::string&) {
                      rejected.emplace_back(from, reason);
                    },
                    [](const std::string& peer) { return peer != "decode-dead"; }},
                {recovery, stall, first_token}} {}
  metrics_registry metrics;
  request_tracker tracker;
  std::vector<std::pair<std::string, std::string>> rejected; // on the tracker's thread
  std::mutex mutex;
  std::vector<protocol::admit_request> admissions;
  std::vector<std::pair<std::string, uint64_t>> cancels; // (decode, cluster id)

  // The n-th admission (from 0), once it has been sent.
  protocol::admit_request admission(size_t n) {
    EXPECT_TRUE(supernode::testing::eventually([&] {
      std::lock_guard lock(mutex);
      return admissions.size() > n;
    })) << "no admission #"
        << n;
    std::lock_guard lock(mutex);
    return admissions.size() > n ? admissions[n] : protocol::admit_request{};
  }

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
            protocol::error failure = {}, const std::string& from = "decode-0",
            int64_t first_index = 0) {
    auto batch = std::make_shared<protocol::token_batch>();
    batch->updates.push_back(
        {{"gateway-0", id}, std::move(tokens), finish, std::move(failure), first_index});
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
  tracker_under_test t(std::chrono::milliseconds(0)); // never resumed
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

TEST(request_tracker, a_request_whose_decode_died_resumes_and_the_client_sees_each_token_once) {
  for (bool stream : {false, true}) {
    tracker_under_test t;
    auto ex = t.start(1, stream);
    auto at_end = ex->in_flight_at_end();
    t.send(1, {5, 6}, protocol::finish_reason::none);
    t.tracker.peer_down("decode-0", "missed 5 heartbeats", false);
    const auto again = t.admission(1);
    EXPECT_NE(again.key.id, 1u) << "a new attempt gets a new id";
    EXPECT_EQ(again.spec.generated, (std::vector<int32_t>{5, 6}));
    // The dead attempt's late tokens name an id nobody has; the new one repeats index 1.
    t.send(1, {7}, protocol::finish_reason::none);
    t.tracker.placed({again.key, "prefill-0", "decode-1"});
    t.send(again.key.id, {6, 7}, protocol::finish_reason::none, {}, "decode-1", 1);
    t.send(again.key.id, {8}, protocol::finish_reason::length, {}, "decode-1", 3);
    EXPECT_EQ(at_end.get(), 0u);
    EXPECT_EQ(ex->status, 200u);
    if (!stream) {
      EXPECT_NE(ex->body.find("\"completion_tokens\":4"), std::string::npos) << ex->body;
      EXPECT_NE(ex->body.find("\"text\":\"5678\""), std::string::npos) << ex->body;
    } else {
      std::lock_guard lock(ex->mutex);
      std::string all;
      for (auto& e : ex->events) all += e;
      for (const char* piece : {"\"5\"", "\"6\"", "\"7\"", "\"8\""})
        EXPECT_NE(all.find(piece), std::string::npos) << piece << " in " << all;
      EXPECT_EQ(ex->events.size(), 5u) << all; // four tokens and [DONE]
    }
    std::lock_guard lock(t.mutex);
    ASSERT_EQ(t.cancels.size(), 1u) << "the old attempt is told to stop, wherever it is";
    EXPECT_EQ(t.cancels[0], std::make_pair(std::string("decode-0"), uint64_t{1}));
  }
}

TEST(request_tracker, a_retryable_failure_resumes_and_a_permanent_one_fails_at_once) {
  tracker_under_test t;
  auto ex = t.start(1, false);
  auto at_end = ex->in_flight_at_end();
  t.send(1, {4}, protocol::finish_reason::error,
         {protocol::ep_errc::group_broken, "expert-parallel group broken"});
  const auto again = t.admission(1);
  EXPECT_EQ(again.spec.generated, (std::vector<int32_t>{4}));
  t.tracker.placed({again.key, "", "decode-1"});
  t.send(again.key.id, {}, protocol::finish_reason::error,
         {protocol::serving_errc::kv_capacity_exceeded, "too long"}, "decode-1");
  EXPECT_EQ(at_end.get(), 0u);
  EXPECT_EQ(ex->status, 400u) << ex->body;
  EXPECT_NE(ex->body.find("too long"), std::string::npos) << ex->body;
}

TEST(request_tracker, later_attempts_back_off_until_a_tick_and_give_up_after_the_timeout) {
  tracker_under_test t(std::chrono::milliseconds(300));
  auto ex = t.start(1, false);
  auto at_end = ex->in_flight_at_end();
  const protocol::error none{protocol::serving_errc::no_decode_instance,
                             "no decode instance is alive"};
  t.tracker.rejected({t.admission(0).key, none});
  auto second = t.admission(1); // the first retry goes at once
  t.tracker.rejected({second.key, none});
  // The next waits for its back-off, sent by a tick; until the timeout, when the client hears.
  std::future_status ended = std::future_status::timeout;
  size_t seen = 2;
  ASSERT_TRUE(supernode::testing::eventually([&] {
    t.tracker.tick();
    {
      std::lock_guard lock(t.mutex);
      for (; seen < t.admissions.size(); ++seen) t.tracker.rejected({t.admissions[seen].key, none});
    }
    ended = at_end.wait_for(std::chrono::milliseconds(0));
    return ended == std::future_status::ready;
  }));
  EXPECT_GE(seen, 3u) << "no attempt after the back-off";
  EXPECT_EQ(ex->status, 503u) << ex->body;
  EXPECT_NE(ex->body.find("not recovered within 300 ms"), std::string::npos) << ex->body;
}

TEST(request_tracker, a_placement_on_an_instance_known_dead_is_placed_again) {
  tracker_under_test t;
  EXPECT_TRUE(t.tracker.reserve());
  auto ex = std::make_shared<recording_exchange>(t.tracker);
  auto r = std::make_shared<tracked_request>();
  r->id = 3;
  r->ex = ex;
  r->text = std::make_unique<text_stream>(std::vector<std::string>{});
  protocol::admit_request message;
  message.key = {"gateway-0", 3};
  t.tracker.admit(r, message);
  t.tracker.placed({message.key, "prefill-0", "decode-dead"});
  const auto again = t.admission(1);
  EXPECT_NE(again.key.id, 3u);
  EXPECT_TRUE(again.spec.generated.empty());
}

TEST(request_tracker, lost_tokens_or_a_stalled_stream_resume_from_what_the_client_has) {
  tracker_under_test t(std::chrono::seconds(30), std::chrono::milliseconds(50));
  auto ex = t.start(1, false);
  auto at_end = ex->in_flight_at_end();
  t.send(1, {5}, protocol::finish_reason::none);
  t.send(1, {7}, protocol::finish_reason::none, {}, "decode-0", 2); // index 1 was lost
  const auto again = t.admission(1);
  EXPECT_EQ(again.spec.generated, (std::vector<int32_t>{5}));
  t.tracker.placed({again.key, "prefill-0", "decode-1"});
  t.send(again.key.id, {6, 7}, protocol::finish_reason::none, {}, "decode-1", 1);
  // Then nothing: after the stall timeout a tick places it again, with all three tokens.
  protocol::admit_request third;
  ASSERT_TRUE(supernode::testing::eventually([&] {
    t.tracker.tick();
    std::lock_guard lock(t.mutex);
    if (t.admissions.size() < 3) return false;
    third = t.admissions[2];
    return true;
  }));
  EXPECT_EQ(third.spec.generated, (std::vector<int32_t>{5, 6, 7}));
  t.tracker.placed({third.key, "prefill-0", "decode-0"});
  t.send(third.key.id, {8}, protocol::finish_reason::length, {}, "decode-0", 3);
  EXPECT_EQ(at_end.get(), 0u);
  EXPECT_NE(ex->body.find("\"text\":\"5678\""), std::string::npos) << ex->body;
}

TEST(request_tracker, a_request_without_its_first_token_past_the_bound_is_placed_again) {
  // Its admission answered (placed) but the prefill, its KV or the first token lost on the way.
  tracker_under_test t(std::chrono::seconds(30), std::chrono::seconds(15),
                       std::chrono::milliseconds(50));
  auto ex = t.start(1, false);
  auto at_end = ex->in_flight_at_end();
  const auto first = t.admission(0);
  t.tracker.placed({first.key, "prefill-0", "decode-0"});
  protocol::admit_request again;
  ASSERT_TRUE(supernode::testing::eventually([&] {
    t.tracker.tick();
    std::lock_guard lock(t.mutex);
    if (t.admissions.size() < 2) return false;
    again = t.admissions[1];
    return true;
  }));
  EXPECT_NE(again.key.id, first.key.id);
  EXPECT_TRUE(again.spec.generated.empty());
  {
    std::lock_guard lock(t.mutex);
    ASSERT_EQ(t.cancels.size(), 1u); // the old attempt is told to stop
    EXPECT_EQ(t.cancels[0], std::make_pair(std::string("decode-0"), first.key.id));
  }
  t.tracker.placed({again.key, "prefill-1", "decode-1"});
  t.send(again.key.id, {4, 2}, protocol::finish_reason::length, {}, "decode-1", 0);
  EXPECT_EQ(at_end.get(), 0u);
  EXPECT_NE(ex->body.find("\"text\":\"42\""), std::string::npos) << ex->body;
}

TEST(request_tracker,
     an_attempt_after_a_failure_waits_half_the_recovery_window_for_its_first_token) {
  // first_token alone would wait past the whole recovery window (60 s > 200 ms): the attempt
  // that follows a failure is given up on at half the window, leaving time for another.
  tracker_under_test t(std::chrono::milliseconds(200), std::chrono::seconds(15),
                       std::chrono::seconds(60));
  auto ex = t.start(1, false);
  auto at_end = ex->in_flight_at_end();
  const auto first = t.admission(0);
  t.tracker.placed({first.key, "prefill-0", "decode-0"});
  t.tracker.peer_down("decode-0", "killed", false); // attempt 2: admitted at once
  const auto second = t.admission(1);
  t.tracker.placed({second.key, "prefill-0", "decode-1"}); // ...and its KV is lost on the way
  ASSERT_TRUE(supernode::testing::eventually([&] {
    t.tracker.tick();
    std::lock_guard lock(t.mutex);
    return t.admissions.size() >= 3;
  }));
  const auto third = t.admission(2);
  t.tracker.placed({third.key, "prefill-0", "decode-1"});
  t.send(third.key.id, {4, 2}, protocol::finish_reason::length, {}, "decode-1", 0);
  EXPECT_EQ(at_end.get(), 0u);
  EXPECT_NE(ex->body.find("\"text\":\"42\""), std::string::npos) << ex->body;
}
