// The scheduler's decisions without an actor system: the scheduler logic is driven directly and
// the instances it talks to are endpoints on inproc planes whose mail the test reads.

#include "../../transport/inbox.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/scheduler/scheduler_service.hpp"
#include "transport/plane_factory.hpp"

#include <gtest/gtest.h>

using namespace supernode;
using namespace supernode::services::protocol;
using supernode::testing::inbox;
using transport::endpoint;

namespace {

constexpr const char* shape = R"(
[cluster]
name = "scheduler-test"
[planes.local]
kind = "inproc"
[flows]
default = "local"
[process.front]
roles = ["gateway", "scheduler"]
[process.prefill]
roles = ["prefill"]
count = 2
[process.decode]
roles = ["decode"]
count = 2
)";

struct scheduler_bench {
  transport::cluster_config cluster = transport::cluster_config::parse(shape, "shape.toml");
  services::serving_config config;
  // The inboxes before the endpoints that fill them: members go in reverse order, so the
  // endpoints' plane threads stop before the inboxes they deliver into (TSan found the reverse).
  std::map<std::string, inbox> mail;
  std::map<std::string, std::unique_ptr<endpoint>> peers;
  std::unique_ptr<endpoint> self;
  std::unique_ptr<services::scheduler_service> scheduler;

  explicit scheduler_bench(int64_t max_queued = 16) {
    register_serving_messages();
    config.block_size = 16;
    config.max_queued = max_queued;
    for (auto name : {"gateway-0", "prefill-0", "prefill-1", "decode-0", "decode-1"}) {
      peers[name] = std::make_unique<endpoint>(cluster, name, transport::make_plane, 1);
      mail[name].attach(*peers[name]);
      peers[name]->start();
    }
    self = std::make_unique<endpoint>(cluster, "scheduler-0", transport::make_plane, 1);
    self->start();
    scheduler = std::make_unique<services::scheduler_service>(config, cluster);
  }

  template<class T>
  void deliver(const std::string& from, T message) {
    EXPECT_TRUE(
        services::dispatch(*scheduler, from, transport::make_envelope(std::move(message)), *self));
  }
  void decode_report(const std::string& d, int64_t capacity, int64_t released = 0,
                     std::vector<request_key> finished = {}) {
    load_report r;
    r.role = "decode";
    r.kv_blocks_total = capacity;
    r.kv_blocks_released = released;
    r.finished = std::move(finished);
    deliver(d, r);
  }
  void admit(uint64_t id, size_t prompt, int32_t max_tokens) {
    admit_request a;
    a.key = {"gateway-0", id};
    a.spec.prompt.assign(prompt, 7);
    a.spec.max_tokens = max_tokens;
    deliver("gateway-0", a);
  }
  void cancel(uint64_t id) {
    cancel_request c;
    c.key.gateway = "gateway-0";
    c.key.id = id;
    c.why = {serving_errc::cancelled, "client disconnected"};
    deliver("gateway-0", c);
  }
  // The n-th message of type T `peer` received (waiting for it).
  template<class T>
  T received(const std::string& peer, size_t n = 0) {
    auto& in = mail[peer];
    EXPECT_TRUE(in.wait_for([&] { return in.template count<T>() > n; }))
        << peer << " got no " << T::type_name;
    std::lock_guard lock(in.m);
    for (auto& [from, m] : in.messages)
      if (auto* t = m.template get<T>(); t && n-- == 0) return *t;
    return {};
  }
  template<class T>
  size_t count(const std::string& peer) {
    std::lock_guard lock(mail[peer].m);
    return mail[peer].template count<T>();
  }
};

} // namespace

TEST(scheduler_service, places_by_free_kv_and_outstanding_prompt_tokens) {
  scheduler_bench b;
  b.decode_report("decode-0", 10);
  b.decode_report("decode-1", 20);
  b.admit(1, 20, 12); // 2 blocks
  auto a1 = b.received<decode_assign>("decode-1");
  EXPECT_EQ(a1.key.id, 1u);
  EXPECT_EQ(a1.prefill, "prefill-0");
  EXPECT_EQ(a1.kv_blocks, 2);
  auto placed = b.received<request_placed>("gateway-0");
  EXPECT_EQ(placed.decode, "decode-1");
  EXPECT_EQ(placed.prefill, "prefill-0");

  // prefill-0 has 20 prompt tokens outstanding now; decode-1 still has the most free blocks.
  b.admit(2, 40, 8);
  auto a2 = b.received<decode_assign>("decode-1", 1);
  EXPECT_EQ(a2.prefill, "prefill-1");
  // A refusal puts the request back at the head; the refusing instance gets no more until it
  // reports again.
  decode_assign_result refusal;
  refusal.key = a2.key;
  refusal.refusal = {serving_errc::kv_exhausted, "KV cache full"};
  b.deliver("decode-1", refusal);
  auto again = b.received<decode_assign>("decode-0");
  EXPECT_EQ(again.key.id, 2u);
  EXPECT_EQ(b.scheduler->queued(), 0u);
}

TEST(scheduler_service, waits_for_kv_and_refuses_what_can_never_fit_or_overflows_the_queue) {
  scheduler_bench b(/*max_queued=*/1);
  b.decode_report("decode-0", 4);
  b.decode_report("decode-1", 4);
  b.admit(1, 100, 20); // 8 blocks: more than any decode instance holds
  auto rejected = b.received<admit_rejected>("gateway-0");
  EXPECT_TRUE(rejected.why.is(serving_errc::kv_capacity_exceeded)) << rejected.why;
  EXPECT_FALSE(rejected.why.retry_elsewhere());

  b.admit(2, 50, 10); // 4 blocks on decode-0
  b.admit(3, 50, 10); // 4 blocks on decode-1
  b.admit(4, 50, 10); // no room: queued
  EXPECT_EQ(b.scheduler->queued(), 1u);
  b.admit(5, 50, 10); // the queue holds one
  auto full = b.received<admit_rejected>("gateway-0", 1);
  EXPECT_EQ(full.key.id, 5u);
  EXPECT_TRUE(full.why.is(serving_errc::queue_full)) << full.why;
  EXPECT_TRUE(full.why.retry_elsewhere());

  // decode-0 finishes request 2 and reports its blocks released: request 4 goes there.
  const auto first = b.received<decode_assign>("decode-0");
  b.decode_report("decode-0", 4, 4, {first.key});
  auto placed = b.received<decode_assign>("decode-0", 1);
  EXPECT_EQ(placed.key.id, 4u);
  EXPECT_EQ(b.scheduler->queued(), 0u);
}

TEST(scheduler_service, a_cancelled_queued_request_is_dropped_and_a_placed_one_forwarded) {
  scheduler_bench b;
  b.decode_report("decode-0", 2);
  b.decode_report("decode-1", 2);
  b.admit(1, 20, 12);
  b.admit(2, 20, 12);
  b.admit(3, 20, 12); // waits
  ASSERT_EQ(b.scheduler->queued(), 1u);
  b.cancel(3);
  EXPECT_EQ(b.scheduler->queued(), 0u);
  b.cancel(1);
  const auto assigned = b.received<decode_assign>("decode-0").key.id == 1 ? "decode-0" : "decode-1";
  auto forwarded = b.received<cancel_request>(assigned);
  EXPECT_EQ(forwarded.key.id, 1u);
}

TEST(scheduler_service,
     a_decode_instance_that_dropped_a_moment_ago_is_waited_for_one_that_left_not) {
  scheduler_bench b;
  b.decode_report("decode-0", 64);
  b.decode_report("decode-1", 64);
  using kind = transport::membership_event::kind;
  // Both drop their connections (a process reopening its endpoint as its roles start): within
  // the liveness window a request waits instead of being refused.
  for (auto d : {"decode-0", "decode-1"})
    b.scheduler->on_member_event({kind::down, d, "control connection dropped"}, *b.self);
  b.admit(1, 20, 4);
  EXPECT_EQ(b.scheduler->queued(), 1u);
  EXPECT_EQ(b.count<admit_rejected>("gateway-0"), 0u);
  // decode-0 is back and reports: the request goes there.
  b.scheduler->on_member_event({kind::joined, "decode-0", "heartbeats resumed"}, *b.self);
  b.decode_report("decode-0", 64);
  EXPECT_EQ(b.received<decode_assign>("decode-0").key.id, 1u);
  EXPECT_EQ(b.scheduler->queued(), 0u);
  // Instances that left are not waited for.
  for (auto d : {"decode-0", "decode-1"})
    b.scheduler->on_member_event({kind::left, d, "drain"}, *b.self);
  b.admit(2, 20, 4);
  const auto refused = b.received<admit_rejected>("gateway-0");
  EXPECT_EQ(refused.key.id, 2u);
  EXPECT_TRUE(refused.why.is(serving_errc::no_decode_instance)) << refused.why;
}
