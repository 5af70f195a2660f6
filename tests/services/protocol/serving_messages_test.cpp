// Every PDC serving message survives the byte planes' frames (whole, by reference, spliced in
// parts) with every field intact, and a damaged or oversized frame of each is refused and
// counted. Each sample fills every field, nested ones included, with a non-default value.

#include "round_trip.hpp"
#include "services/protocol/serving_messages.hpp"

#include <gtest/gtest.h>

using namespace supernode;
using namespace supernode::services::protocol;
using supernode::testing::expect_damaged_frames_rejected;
using supernode::testing::expect_every_field_set;
using supernode::testing::expect_oversized_rejected;
using supernode::testing::expect_round_trip;
using supernode::testing::patterned_bytes;

namespace {

request_key key(uint64_t id) {
  return {"gateway-" + std::to_string(id % 3), id};
}

request_spec spec() {
  request_spec s;
  s.prompt = {5, 129001, 7, 0, 42};
  s.max_tokens = 77;
  s.temperature = 0.75f;
  s.top_p = 0.875f;
  s.top_k = 40;
  s.seed = 0xfeedface12345678ull;
  s.stop_at_eos = false;
  s.generated = {9, 129279};
  return s;
}

plane_traffic traffic(const std::string& plane, uint64_t base) {
  return {plane, base + 1, base + 2, base + 3, base + 4, base + 5};
}

cache_stats cache() {
  cache_stats c;
  c.lookups = 1;
  c.lookup_tokens = 2;
  c.hit_tokens = 3;
  c.stored_blocks = 4;
  c.store_failures = 5;
  c.read_errors = 6;
  c.load_seconds = 0.125;
  c.loaded_bytes = 8;
  c.dram_blocks = 9;
  c.dram_bytes = 10;
  c.ssd_blocks = 11;
  c.ssd_bytes = 12;
  c.dram_hits = 13;
  c.ssd_hits = 14;
  c.misses = 15;
  c.corrupt_blocks = 16;
  c.evicted_dram = 17;
  c.deleted_ssd = 18;
  c.rejected_puts = 19;
  c.handed_over_in = 20;
  c.handed_over_out = 21;
  c.handover_failed = 22;
  return c;
}

// A sequence moving off a draining decode instance.
moved_kv moved() {
  return {"decode-3", key(30)};
}

admit_request admit() {
  return {key(1), spec(), moved()};
}

decode_assign_result assign_result() {
  return {key(2), {serving_errc::kv_exhausted, "no free blocks"}};
}

load_report report() {
  load_report r;
  r.role = "decode";
  r.kv_blocks_total = 2048;
  r.kv_blocks_released = 333;
  r.kv_blocks_used = 55;
  r.prompt_tokens_completed = 4444;
  r.running = 5;
  r.waiting = 6;
  r.finished = {key(7), key(8)};
  r.planes = {traffic("ub", 100), traffic("vpc", 200)};
  r.unavailable = {ep_errc::group_broken, "rank 1 silent"};
  r.ep_stage_seconds = {0.5, 1.25, 2.0};
  r.ep_forwards = 99;
  r.cache = cache();
  r.unexpected_messages = {{"ping", 3}, {"admit_request", 1}};
  r.rejected_messages = {{"not_from_placed_decode", 2}};
  r.sequences_moved_in = 3;
  r.sequences_moved_out = 4;
  r.mtp_drafted = 90;
  r.mtp_accepted = 61;
  r.mtp_drafting_steps = 45;
  r.mtp_depth = 2;
  return r;
}

cancel_request cancel() {
  return {key(9), {serving_errc::cancelled, "client went away"}};
}

admit_rejected rejected() {
  return {key(10), {serving_errc::queue_full, "1024 queued"}};
}

request_placed placed() {
  return {key(11), "prefill-1", "decode-2"};
}

token_update update(uint64_t id, finish_reason finish) {
  token_update u;
  u.key = key(id);
  u.tokens = {11, 22, static_cast<int32_t>(id)};
  u.finish = finish;
  u.failure = {serving_errc::internal, "update " + std::to_string(id)};
  u.first_index = static_cast<int64_t>(id) + 100;
  return u;
}

token_batch tokens() {
  return {{update(12, finish_reason::stop), update(13, finish_reason::length),
           update(14, finish_reason::cancelled), update(15, finish_reason::error)}};
}

instance_stats instance(const std::string& name) {
  instance_stats s;
  s.name = name;
  s.role = "decode";
  s.alive = false;
  s.running = 1;
  s.waiting = 2;
  s.kv_blocks_used = 3;
  s.kv_blocks_total = 4;
  s.outstanding_prompt_tokens = 5;
  s.unavailable = {serving_errc::instance_unavailable, "group broke"};
  s.ep_stage_seconds = {0.25};
  s.ep_forwards = 6;
  s.cache = cache();
  s.unexpected_messages = {{"kv_transfer", 2}};
  s.rejected_messages = {{"leave_for_another", 1}};
  s.sequences_moved_in = 5;
  s.sequences_moved_out = 6;
  s.mtp_drafted = 80;
  s.mtp_accepted = 51;
  s.mtp_drafting_steps = 40;
  s.mtp_depth = 1;
  return s;
}

cluster_stats stats() {
  cluster_stats c;
  c.queued = 17;
  c.instances = {instance("decode-0"), instance("decode-1")};
  c.planes = {{"decode-0", traffic("ub", 300)}, {"prefill-0", traffic("vpc", 400)}};
  c.scheduler = "scheduler-0";
  c.scheduler_unexpected = {{"token_batch", 4}};
  c.scheduler_rejected = {{"not_from_request_gateway", 5}};
  return c;
}

decode_assign assign() {
  return {key(16), spec(), "decode-3", 12, moved()};
}

// 48 KiB of KV: over the splice threshold, so the spliced frame references it.
kv_transfer kv(size_t bytes = 48 << 10) {
  kv_transfer k;
  k.key = key(17);
  k.first_token = 1234;
  k.prompt_tokens = 40;
  k.generated_tokens = 9;
  k.block_floats = 3072;
  k.first_block = 1;
  k.block_count = 2;
  k.total_blocks = 3;
  k.mtp_first_position = 39;
  k.mtp_following = {1234};
  k.mtp_hidden = {0.5f, -1.25f, 3.0f};
  k.checksum = 0x5eed'0000'c0ffee17;
  k.data = patterned_bytes(bytes, 17);
  return k;
}

prefill_failed failed() {
  return {key(18), {serving_errc::prefill_failed, "forward threw"}};
}

prefill_request prefill() {
  return {key(19), spec(), moved()};
}

moved_kv_received moved_received() {
  return {key(30)};
}

decode_batch_cap batch_cap() {
  return {12};
}

// Every message type of the serving protocol, as a sample filling every field.
template<class Fn>
void for_every_sample(Fn&& fn) {
  fn(admit());
  fn(assign_result());
  fn(report());
  fn(cancel());
  fn(rejected());
  fn(placed());
  fn(tokens());
  fn(stats());
  fn(assign());
  fn(kv());
  fn(failed());
  fn(prefill());
  fn(moved_received());
  fn(batch_cap());
}

class serving_messages : public ::testing::Test {
protected:
  void SetUp() override { register_serving_messages(); }
};

} // namespace

TEST_F(serving_messages, every_sample_sets_every_field) {
  for_every_sample([](const auto& m) { expect_every_field_set(m); });
  // Structs inside vectors: their own fields too.
  expect_every_field_set(report().finished[0]);
  expect_every_field_set(report().planes[0]);
  for (const auto& u : tokens().updates) expect_every_field_set(u);
  expect_every_field_set(stats().instances[0]);
  expect_every_field_set(stats().planes[0].second);
}

TEST_F(serving_messages, admission_and_placement_round_trip) {
  auto a = expect_round_trip(admit(), 0);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->key, key(1));
  EXPECT_EQ(a->spec.prompt, spec().prompt);
  EXPECT_EQ(a->spec.temperature, 0.75f);
  EXPECT_EQ(a->spec.seed, 0xfeedface12345678ull);
  EXPECT_FALSE(a->spec.stop_at_eos);

  auto r = expect_round_trip(rejected(), 0);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->why.is(serving_errc::queue_full));
  EXPECT_EQ(r->why.message, "1024 queued");

  auto p = expect_round_trip(placed(), 0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->prefill, "prefill-1");
  EXPECT_EQ(p->decode, "decode-2");

  auto c = expect_round_trip(cancel(), 0);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->why.is(serving_errc::cancelled));
  EXPECT_EQ(c->key, key(9));
}

TEST_F(serving_messages, decode_and_prefill_requests_round_trip) {
  auto d = expect_round_trip(assign(), 0);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->prefill, "decode-3");
  EXPECT_EQ(d->moved.instance, "decode-3");
  EXPECT_EQ(d->moved.key.id, 30u);
  EXPECT_EQ(d->kv_blocks, 12);
  EXPECT_EQ(d->spec.top_k, 40);

  auto res = expect_round_trip(assign_result(), 0);
  ASSERT_TRUE(res);
  EXPECT_FALSE(res->accepted());
  EXPECT_TRUE(res->refusal.is(serving_errc::kv_exhausted));

  auto p = expect_round_trip(prefill(), 0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->spec.max_tokens, 77);
  EXPECT_EQ(p->moved.key.id, 30u);

  auto f = expect_round_trip(failed(), 0);
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->why.is(serving_errc::prefill_failed));
  EXPECT_EQ(f->why.message, "forward threw");
}

TEST_F(serving_messages, kv_transfer_round_trips_with_its_blocks_spliced) {
  auto k = expect_round_trip(kv(), 1);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->first_token, 1234);
  EXPECT_EQ(k->block_floats, 3072);
  EXPECT_EQ(k->first_block, 1);
  EXPECT_EQ(k->total_blocks, 3);
  EXPECT_EQ(k->data, kv().data);
  // A small run stays inside the head.
  auto small = expect_round_trip(kv(100), 0);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->data, kv(100).data);
}

TEST_F(serving_messages, token_batches_keep_every_finish_reason_and_failure) {
  auto t = expect_round_trip(tokens(), 0);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->updates.size(), 4u);
  const finish_reason want[] = {finish_reason::stop, finish_reason::length,
                                finish_reason::cancelled, finish_reason::error};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(t->updates[i].finish, want[i]);
    EXPECT_EQ(t->updates[i].key, key(12 + i));
    EXPECT_TRUE(t->updates[i].failure.is(serving_errc::internal));
  }
  EXPECT_EQ(t->updates[3].tokens, (std::vector<int32_t>{11, 22, 15}));
}

TEST_F(serving_messages, load_reports_and_cluster_stats_round_trip) {
  auto r = expect_round_trip(report(), 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->finished, (std::vector<request_key>{key(7), key(8)}));
  ASSERT_EQ(r->planes.size(), 2u);
  EXPECT_EQ(r->planes[1].plane, "vpc");
  EXPECT_EQ(r->planes[1].bad_frames, 205u);
  EXPECT_TRUE(r->unavailable.is(ep_errc::group_broken));
  EXPECT_EQ(r->cache.rejected_puts, 19u);
  EXPECT_EQ(r->cache.handed_over_in, 20u);
  EXPECT_EQ(r->cache.handed_over_out, 21u);
  EXPECT_EQ(r->cache.handover_failed, 22u);
  EXPECT_EQ(r->cache.load_seconds, 0.125);
  EXPECT_EQ(r->unexpected_messages.at("ping"), 3u);

  auto s = expect_round_trip(stats(), 0);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->instances.size(), 2u);
  EXPECT_FALSE(s->instances[1].alive);
  EXPECT_EQ(s->instances[1].name, "decode-1");
  EXPECT_EQ(s->instances[0].cache.misses, 15u);
  EXPECT_EQ(s->planes[1].first, "prefill-0");
  EXPECT_EQ(s->planes[1].second.bytes_sent, 401u);
  EXPECT_EQ(s->scheduler_unexpected.at("token_batch"), 4u);
  EXPECT_EQ(s->scheduler_rejected.at("not_from_request_gateway"), 5u);
}

TEST_F(serving_messages, damaged_frames_of_every_type_are_refused_and_counted) {
  for_every_sample([](const auto& m) { expect_damaged_frames_rejected(m); });
}

TEST_F(serving_messages, a_message_over_its_limit_is_refused) {
  auto big_key = [](size_t bytes) { return request_key{std::string(bytes, 'g'), 1}; };
  expect_oversized_rejected(decode_assign_result{big_key(4096), {}});
  expect_oversized_rejected(cancel_request{big_key(4096), {}});
  expect_oversized_rejected(admit_rejected{big_key(4096), {}});
  expect_oversized_rejected(request_placed{big_key(4096), "", ""});
  expect_oversized_rejected(prefill_failed{big_key(4096), {}});
  request_spec long_prompt;
  long_prompt.prompt.assign((4u << 20) / 4, 1 << 20); // 5 bytes each packed
  expect_oversized_rejected(admit_request{key(1), long_prompt, {}});
  expect_oversized_rejected(prefill_request{key(1), long_prompt, {}});
  expect_oversized_rejected(decode_assign{key(1), long_prompt, "", 0, {}});
  load_report r;
  r.role = std::string(1u << 20, 'r');
  expect_oversized_rejected(r);
  cluster_stats s;
  s.scheduler = std::string(4u << 20, 's');
  expect_oversized_rejected(s);
  token_batch t{{update(1, finish_reason::none)}};
  t.updates[0].tokens.assign((16u << 20) / 4, 1 << 20);
  expect_oversized_rejected(t);
  expect_oversized_rejected(kv(kv_transfer::max_bytes));
}
