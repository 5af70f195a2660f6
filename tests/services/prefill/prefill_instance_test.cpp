// A prefill instance over the inproc plane, with no processes or actors: the test plays the
// decode instance that routes prompts to it. A prompt comes back as kv_transfer runs covering
// every block, carrying the reference engine's first token and the KV a prefill of the prompt
// on its own computes, bit for bit; a prompt it cannot take comes back as prefill_failed.

#include "../../support/inproc_cluster.hpp"
#include "../../support/probe_endpoint.hpp"
#include "../../support/role_host.hpp"
#include "../../support/serving_reference.hpp"
#include "../../transport/inbox.hpp"
#include "services/prefill/prefill_instance.hpp"

#include <algorithm>
#include <cstring>
#include <gtest/gtest.h>
#include <optional>

using namespace supernode;
using namespace supernode::services;
using protocol::request_key;
using protocol::request_spec;
using protocol::serving_errc;
using supernode::testing::inbox;

namespace {

constexpr int64_t block_size = 16;

std::string tables() {
  return "[process.all]\nroles = [\"scheduler\", \"prefill\", \"decode\"]\n"
         "[model]\npath = \"" +
         supernode::testing::tiny_model_dir().string() +
         "\"\n[kv]\nblock_size = " + std::to_string(block_size) +
         "\n[prefill]\ntoken_budget = 64\n";
}

struct prefill_bench {
  supernode::testing::inproc_cluster_file config{"prefill-test", tables()};
  // Made before any endpoint starts: loading the model may outlast the heartbeat timeout.
  std::shared_ptr<prefill_instance> service = std::make_shared<prefill_instance>(
      supernode::testing::tiny_weights(config.file.serving.precision), config.file.serving);
  inbox decode_mail;
  supernode::testing::probe_endpoint decode{
      config.file.cluster, "decode-0", [this](transport::endpoint& e) { decode_mail.attach(e); }};
  supernode::testing::role_host<prefill_instance> prefill{config.file.cluster, "prefill-0",
                                                          service};

  void request(const request_key& key, const request_spec& spec) {
    ASSERT_EQ(decode.ep.send("control", "prefill-0",
                             transport::make_envelope(protocol::prefill_request{key, spec, {}})),
              transport::send_status::ok);
  }
  // Until the runs of `key` cover `blocks` blocks; the runs in block order.
  std::vector<protocol::kv_transfer> runs_of(const request_key& key, int64_t blocks) {
    std::vector<protocol::kv_transfer> runs;
    decode_mail.wait_for([&] {
      runs.clear();
      int64_t covered = 0;
      for (const auto& [from, m] : decode_mail.messages)
        if (const auto* kv = m.get<protocol::kv_transfer>(); kv && kv->key == key) {
          runs.push_back(*kv);
          covered += kv->block_count;
        }
      return covered >= blocks;
    });
    std::sort(runs.begin(), runs.end(),
              [](const auto& a, const auto& b) { return a.first_block < b.first_block; });
    return runs;
  }
};

request_spec greedy(int64_t prompt_tokens, int64_t salt) {
  request_spec s;
  s.prompt = supernode::testing::test_prompt(prompt_tokens, salt);
  s.max_tokens = 4;
  return s;
}

} // namespace

TEST(prefill_instance, a_prompt_comes_back_as_kv_runs_with_the_reference_first_token) {
  prefill_bench b;
  // Longer than the token budget (chunked over steps), and a short one packed beside it.
  const request_key longer{"gateway-0", 1}, shorter{"gateway-0", 2};
  const auto long_spec = greedy(150, 1), short_spec = greedy(5, 2);
  b.request(longer, long_spec);
  b.request(shorter, short_spec);

  for (const auto& [key, spec] : {std::pair{longer, long_spec}, std::pair{shorter, short_spec}}) {
    const auto want = supernode::testing::prefill_prompt(key, spec, block_size, 1 << 20);
    ASSERT_EQ(want.runs.size(), 1u);
    const auto& whole = want.runs[0];
    const auto runs = b.runs_of(key, whole.total_blocks);
    ASSERT_FALSE(runs.empty()) << key.str();
    const auto first_token = supernode::testing::reference_generation(spec).tokens.at(0);
    int64_t next_block = 0;
    for (const auto& run : runs) {
      EXPECT_EQ(run.first_token, first_token) << key.str();
      EXPECT_EQ(run.prompt_tokens, static_cast<int64_t>(spec.prompt.size()));
      EXPECT_EQ(run.block_floats, whole.block_floats);
      EXPECT_EQ(run.total_blocks, whole.total_blocks);
      EXPECT_EQ(run.first_block, next_block) << "runs overlap or leave a gap";
      const size_t block_bytes = whole.data.size() / whole.total_blocks;
      ASSERT_EQ(run.data.size(), run.block_count * block_bytes);
      EXPECT_EQ(0, std::memcmp(run.data.data(), whole.data.data() + run.first_block * block_bytes,
                               run.data.size()))
          << key.str() << ": KV of blocks from " << run.first_block << " differs";
      next_block += run.block_count;
    }
    EXPECT_EQ(next_block, whole.total_blocks);
  }
}

TEST(prefill_instance, an_empty_prompt_fails_with_invalid_request) {
  prefill_bench b;
  const request_key key{"gateway-0", 7};
  b.request(key, request_spec{});
  std::optional<protocol::error> why;
  ASSERT_TRUE(b.decode_mail.wait_for([&] {
    for (const auto& [from, m] : b.decode_mail.messages)
      if (const auto* f = m.get<protocol::prefill_failed>(); f && f->key == key) why = f->why;
    return why.has_value();
  }));
  EXPECT_TRUE(why->is(serving_errc::invalid_request)) << *why;
  EXPECT_FALSE(why->message.empty());
  std::lock_guard lock(b.decode_mail.m);
  EXPECT_EQ(b.decode_mail.count<protocol::kv_transfer>(), 0u);
}
