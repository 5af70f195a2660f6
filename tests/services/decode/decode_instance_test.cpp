// A decode instance over the inproc plane, with no processes or actors: the test plays its
// scheduler, its prefill instance (shipping KV it computed itself on the tiny model) and its
// gateway. Assigned requests reserve KV and go to the prefill instance; the KV runs, in any
// order, start them and the tokens reaching the gateway are the reference engine's; cancels,
// refusals and bad transfers end requests with their codes and give their blocks back.

#include "../../support/inproc_cluster.hpp"
#include "../../support/probe_endpoint.hpp"
#include "../../support/role_host.hpp"
#include "../../support/sanitizer_slowdown.hpp"
#include "../../support/serving_reference.hpp"
#include "../../transport/inbox.hpp"
#include "services/decode/decode_instance.hpp"

#include <algorithm>
#include <gtest/gtest.h>
#include <optional>

using namespace supernode;
using namespace supernode::services;
using protocol::finish_reason;
using protocol::request_key;
using protocol::request_spec;
using protocol::serving_errc;
using supernode::testing::inbox;
using supernode::testing::probe_endpoint;

namespace {

constexpr int64_t block_size = 16;
constexpr int64_t pool_blocks = 128;

std::string tables() {
  return "[process.all]\nroles = [\"gateway\", \"scheduler\", \"prefill\", \"decode\"]\n"
         "[model]\npath = \"" +
         supernode::testing::tiny_model_dir().string() +
         "\"\n[kv]\nblock_size = " + std::to_string(block_size) +
         "\n[decode]\nkv_blocks = " + std::to_string(pool_blocks) + "\n";
}

request_spec greedy(int64_t prompt_tokens, int32_t max_tokens, int64_t salt) {
  request_spec s;
  s.prompt = supernode::testing::test_prompt(prompt_tokens, salt);
  s.max_tokens = max_tokens;
  return s;
}

int64_t blocks_for(const request_spec& s) {
  return (static_cast<int64_t>(s.prompt.size()) + s.max_tokens + block_size - 1) / block_size;
}

// One request's updates as the gateway received them.
struct token_stream {
  std::vector<int32_t> tokens;
  finish_reason finish = finish_reason::none;
  protocol::error failure;
  size_t updates = 0;
};

// Call with the inbox's lock held (inside wait_for's predicate, or under its mutex).
token_stream stream_in(const inbox& mail, const request_key& key) {
  token_stream s;
  for (const auto& [from, m] : mail.messages)
    if (const auto* batch = m.get<protocol::token_batch>())
      for (const auto& u : batch->updates)
        if (u.key == key) {
          s.tokens.insert(s.tokens.end(), u.tokens.begin(), u.tokens.end());
          s.finish = u.finish;
          s.failure = u.failure;
          ++s.updates;
        }
  return s;
}

template<class T>
const T* find_for(const inbox& mail, const request_key& key) {
  for (const auto& [from, m] : mail.messages)
    if (const auto* x = m.template get<T>(); x && x->key == key) return x;
  return nullptr;
}

struct decode_bench {
  supernode::testing::inproc_cluster_file config{"decode-test", tables()};
  const transport::cluster_config& cluster = config.file.cluster;
  // Made before any endpoint starts: loading the model may outlast the heartbeat timeout.
  std::shared_ptr<decode_instance> service = std::make_shared<decode_instance>(
      supernode::testing::tiny_weights(config.file.serving.precision), config.file.serving);
  inbox scheduler_mail, prefill_mail, gateway_mail;
  probe_endpoint scheduler{cluster, "scheduler-0",
                           [this](transport::endpoint& e) { scheduler_mail.attach(e); }};
  probe_endpoint prefill{cluster, "prefill-0",
                         [this](transport::endpoint& e) { prefill_mail.attach(e); }};
  probe_endpoint gateway{cluster, "gateway-0",
                         [this](transport::endpoint& e) { gateway_mail.attach(e); }};
  supernode::testing::role_host<decode_instance> decode{cluster, "decode-0", service};

  // The scheduler's assignment and the instance's answer (ok: accepted).
  protocol::error assign(const request_key& key, const request_spec& spec) {
    protocol::decode_assign a{key, spec, "prefill-0", blocks_for(spec), {}};
    EXPECT_EQ(scheduler.ep.send("control", "decode-0", transport::make_envelope(a)),
              transport::send_status::ok);
    protocol::error refusal{serving_errc::internal, "no decode_assign_result"};
    scheduler_mail.wait_for([&] {
      const auto* r = find_for<protocol::decode_assign_result>(scheduler_mail, key);
      if (r) refusal = r->refusal;
      return r != nullptr;
    });
    return refusal;
  }
  // The prompt the decode instance routed to the prefill instance.
  std::optional<protocol::prefill_request> routed(const request_key& key) {
    std::optional<protocol::prefill_request> got;
    prefill_mail.wait_for([&] {
      if (const auto* r = find_for<protocol::prefill_request>(prefill_mail, key)) got = *r;
      return got.has_value();
    });
    return got;
  }
  void ship(const std::vector<protocol::kv_transfer>& runs) {
    for (const auto& run : runs)
      ASSERT_EQ(prefill.ep.send("bulk", "decode-0", transport::make_envelope(run)),
                transport::send_status::ok);
  }
  void send_cancel(probe_endpoint& from, const request_key& key, serving_errc why) {
    protocol::cancel_request c{key, {why, "the test cancels"}};
    ASSERT_EQ(from.ep.send("control", "decode-0", transport::make_envelope(c)),
              transport::send_status::ok);
  }
  // Until the request's last update arrived (finish set).
  token_stream finished_stream(const request_key& key) {
    token_stream s;
    EXPECT_TRUE(gateway_mail.wait_for(
        [&] {
          s = stream_in(gateway_mail, key);
          return s.finish != finish_reason::none;
        },
        supernode::testing::scaled(std::chrono::milliseconds(10000))))
        << key.str() << " never finished";
    return s;
  }
  // Until a load report says `blocks` were ever released and `key` finished.
  bool released(int64_t blocks, const request_key& key) {
    return scheduler_mail.wait_for([&] {
      bool count = false, listed = false;
      for (const auto& [from, m] : scheduler_mail.messages)
        if (const auto* r = m.get<protocol::load_report>()) {
          count |= r->kv_blocks_released == blocks;
          listed |= std::find(r->finished.begin(), r->finished.end(), key) != r->finished.end();
        }
      return count && listed;
    });
  }
  int64_t free_blocks() { return decode.service().free_kv_blocks(); }
};

} // namespace

TEST(decode_instance, shipped_kv_starts_requests_whose_tokens_match_the_reference) {
  decode_bench b;
  const request_key first{"gateway-0", 1}, second{"gateway-0", 2};
  const auto first_spec = greedy(40, 12, 1), second_spec = greedy(70, 9, 2);
  ASSERT_TRUE(b.assign(first, first_spec).ok());
  ASSERT_TRUE(b.assign(second, second_spec).ok());
  EXPECT_EQ(b.free_blocks(), pool_blocks - blocks_for(first_spec) - blocks_for(second_spec));

  const auto routed = b.routed(first);
  ASSERT_TRUE(routed);
  EXPECT_EQ(routed->spec.prompt, first_spec.prompt);
  EXPECT_EQ(routed->spec.max_tokens, first_spec.max_tokens);
  ASSERT_TRUE(b.routed(second));

  // One block per run, the last first: runs may arrive in any order.
  auto first_kv = supernode::testing::prefill_prompt(first, first_spec, block_size, 1);
  ASSERT_EQ(first_kv.runs.size(), 3u);
  std::reverse(first_kv.runs.begin(), first_kv.runs.end());
  b.ship(first_kv.runs);
  b.ship(supernode::testing::prefill_prompt(second, second_spec, block_size, 2).runs);

  for (const auto& [key, spec] : {std::pair{first, first_spec}, std::pair{second, second_spec}}) {
    const auto want = supernode::testing::reference_generation(spec);
    const auto got = b.finished_stream(key);
    EXPECT_EQ(got.tokens, want.tokens) << key.str();
    EXPECT_EQ(protocol::to_string(got.finish), want.finish_reason) << key.str();
    EXPECT_TRUE(got.failure.ok()) << got.failure;
  }
  EXPECT_TRUE(b.released(blocks_for(first_spec) + blocks_for(second_spec), second));
  EXPECT_EQ(b.free_blocks(), pool_blocks);
}

TEST(decode_instance, a_cancel_ends_a_running_request_and_frees_its_kv) {
  decode_bench b;
  const request_key key{"gateway-0", 1};
  auto spec = greedy(20, 1500, 3);
  spec.stop_at_eos = false; // only the cancel can end it early
  ASSERT_TRUE(b.assign(key, spec).ok());
  ASSERT_TRUE(b.routed(key));
  b.ship(supernode::testing::prefill_prompt(key, spec, block_size, 4).runs);
  ASSERT_TRUE(b.gateway_mail.wait_for([&] { return stream_in(b.gateway_mail, key).updates > 0; }));
  b.send_cancel(b.gateway, key, serving_errc::cancelled);

  const auto got = b.finished_stream(key);
  EXPECT_EQ(got.finish, finish_reason::cancelled);
  EXPECT_TRUE(got.failure.is(serving_errc::cancelled)) << got.failure;
  EXPECT_LT(got.tokens.size(), static_cast<size_t>(spec.max_tokens));
  EXPECT_TRUE(b.released(blocks_for(spec), key));
  EXPECT_EQ(b.free_blocks(), pool_blocks);
}

TEST(decode_instance, a_cancel_before_the_kv_arrives_frees_its_blocks_and_late_kv_is_ignored) {
  decode_bench b;
  const request_key key{"gateway-0", 1};
  const auto spec = greedy(33, 8, 4);
  ASSERT_TRUE(b.assign(key, spec).ok());
  ASSERT_TRUE(b.routed(key));
  b.send_cancel(b.scheduler, key, serving_errc::cancelled);
  const auto got = b.finished_stream(key);
  EXPECT_EQ(got.finish, finish_reason::cancelled);
  EXPECT_TRUE(got.tokens.empty());
  EXPECT_TRUE(b.released(blocks_for(spec), key));

  // KV for the cancelled request starts nothing; a later request still runs to its end.
  b.ship(supernode::testing::prefill_prompt(key, spec, block_size, 8).runs);
  const request_key next{"gateway-0", 2};
  const auto next_spec = greedy(10, 4, 5);
  ASSERT_TRUE(b.assign(next, next_spec).ok());
  ASSERT_TRUE(b.routed(next));
  b.ship(supernode::testing::prefill_prompt(next, next_spec, block_size, 8).runs);
  EXPECT_EQ(b.finished_stream(next).tokens,
            supernode::testing::reference_generation(next_spec).tokens);
  std::lock_guard lock(b.gateway_mail.m);
  EXPECT_EQ(stream_in(b.gateway_mail, key).updates, 1u) << "the cancelled request came back";
}

TEST(decode_instance, an_assignment_larger_than_the_pool_is_refused_with_kv_exhausted) {
  decode_bench b;
  const request_key big{"gateway-0", 1}, small{"gateway-0", 2};
  const auto big_spec = greedy(10, static_cast<int32_t>(pool_blocks * block_size), 6);
  const auto refusal = b.assign(big, big_spec);
  EXPECT_TRUE(refusal.is(serving_errc::kv_exhausted)) << refusal;
  EXPECT_FALSE(refusal.message.empty());
  EXPECT_EQ(b.free_blocks(), pool_blocks);

  // The refused request went nowhere: the next one is the only prompt the prefill side sees.
  ASSERT_TRUE(b.assign(small, greedy(10, 4, 7)).ok());
  ASSERT_TRUE(b.routed(small));
  std::lock_guard lock(b.prefill_mail.m);
  EXPECT_EQ(find_for<protocol::prefill_request>(b.prefill_mail, big), nullptr);
}

namespace {
// One request assigned and routed, its KV shipped in one run after `spoil` changed it; the stream
// it ended with.
template<class Spoil>
auto finished_after_bad_kv(decode_bench& b, const request_key& key, const request_spec& spec,
                           Spoil spoil) {
  EXPECT_TRUE(b.assign(key, spec).ok());
  EXPECT_TRUE(b.routed(key));
  auto kv = supernode::testing::prefill_prompt(key, spec, block_size, 3);
  EXPECT_EQ(kv.runs.size(), 1u);
  spoil(kv.runs[0]);
  b.ship(kv.runs);
  return b.finished_stream(key);
}
} // namespace

TEST(decode_instance, kv_of_another_block_shape_ends_the_request_with_kv_layout_mismatch) {
  decode_bench b;
  const request_key key{"gateway-0", 1};
  const auto spec = greedy(40, 6, 8);
  const auto got = finished_after_bad_kv(b, key, spec, [](auto& run) { run.block_floats += 1; });
  EXPECT_EQ(got.finish, finish_reason::error);
  EXPECT_TRUE(got.failure.is(serving_errc::kv_layout_mismatch)) << got.failure;
  EXPECT_TRUE(got.tokens.empty());
  EXPECT_TRUE(b.released(blocks_for(spec), key));
  EXPECT_EQ(b.free_blocks(), pool_blocks);
}

TEST(decode_instance, kv_damaged_on_the_way_ends_the_request_retryably) {
  // A frame that still decodes with one byte of a block changed (a plane without integrity
  // checks): the checksum differs, so the request ends with delivery_failed, which the gateway
  // places again, instead of decoding from wrong KV.
  decode_bench b;
  const request_key key{"gateway-0", 1};
  const auto spec = greedy(40, 6, 8);
  const auto got = finished_after_bad_kv(b, key, spec, [](auto& run) {
    std::vector<char> bytes(run.data.data(), run.data.data() + run.data.size());
    bytes[bytes.size() / 2] ^= 0x10;
    run.data = supernode::transport::shared_bytes(std::move(bytes));
  });
  EXPECT_EQ(got.finish, finish_reason::error);
  EXPECT_TRUE(got.failure.is(serving_errc::delivery_failed)) << got.failure;
  EXPECT_TRUE(got.failure.retry_elsewhere()) << got.failure;
  EXPECT_TRUE(got.tokens.empty());
  EXPECT_EQ(b.free_blocks(), pool_blocks);
}

namespace {

// Two long requests whose KV ships one after the other, after `cap` came from `from`: true
// when the second joined the batch only after the first had finished.
bool second_waited_for_the_first(decode_bench& b, probe_endpoint& from, int64_t cap) {
  // Over inproc a send is in the instance's mailbox when it returns: the cap comes first.
  EXPECT_EQ(from.ep.send("control", "decode-0",
                         transport::make_envelope(protocol::decode_batch_cap{cap})),
            transport::send_status::ok);
  const request_key first{"gateway-0", 1}, second{"gateway-0", 2};
  auto spec = greedy(20, 300, 5); // long enough to still run when the second KV lands
  spec.stop_at_eos = false;
  EXPECT_TRUE(b.assign(first, spec).ok());
  EXPECT_TRUE(b.assign(second, spec).ok());
  b.ship(supernode::testing::prefill_prompt(first, spec, block_size, 5).runs);
  EXPECT_TRUE(
      b.gateway_mail.wait_for([&] { return stream_in(b.gateway_mail, first).updates > 0; }));
  b.ship(supernode::testing::prefill_prompt(second, spec, block_size, 5).runs);
  b.finished_stream(first);
  b.finished_stream(second);
  std::lock_guard lock(b.gateway_mail.m);
  std::optional<size_t> first_ended, second_began;
  for (size_t i = 0; i < b.gateway_mail.messages.size(); ++i)
    if (const auto* batch = b.gateway_mail.messages[i].second.get<protocol::token_batch>())
      for (const auto& u : batch->updates) {
        if (u.key == first && u.finish != finish_reason::none) first_ended = i;
        if (u.key == second && !second_began) second_began = i;
      }
  return first_ended && second_began && *second_began > *first_ended;
}

} // namespace

TEST(decode_instance, a_batch_cap_from_a_gateway_seats_that_many_and_the_rest_wait) {
  decode_bench capped;
  EXPECT_TRUE(second_waited_for_the_first(capped, capped.gateway, 1));
  // From anyone else the cap is refused: both run side by side under [decode] max_batch.
  decode_bench refused;
  EXPECT_FALSE(second_waited_for_the_first(refused, refused.scheduler, 1));
}
