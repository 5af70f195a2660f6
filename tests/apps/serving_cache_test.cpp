// The context cache through the HTTP API: greedy tokens equal the reference engine's with the
// cache cold and hot, for prompts sharing 0-100 % of a prefix, with the pool reached over UB,
// over VPC, and embedded in `supernode serve`; the hot round really loads KV from the pool
// (/metrics), and a pool server killed mid-service costs hits, never answers — and with
// [ems] replicas = 2 not even hits.

#include "serving_fixture.hpp"

#include <csignal>
#include <fstream>
#include <gtest/gtest.h>
#include <iostream>

using namespace supernode::testing;

namespace {

constexpr int64_t prompt_tokens = 96;
constexpr int64_t cache_block = 16;

// Prompts sharing 0, 25, 50, 75 and 100 % of one prefix, each completed by its own tokens.
std::vector<served_prompt> shared_prefix_prompts() {
  const auto base = test_prompt(prompt_tokens, 777);
  std::vector<served_prompt> out;
  for (int share : {0, 25, 50, 75, 100}) {
    const int64_t n = prompt_tokens * share / 100;
    std::vector<int32_t> ids(base.begin(), base.begin() + n);
    const auto tail = test_prompt(prompt_tokens - n, 5000 + share);
    ids.insert(ids.end(), tail.begin(), tail.end());
    out.push_back({ids, 6});
  }
  return out;
}

void expect_reference(int port, const std::vector<served_prompt>& prompts, const char* round) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto r = http_call(port, "POST", "/v1/completions", completion_body(prompts[i], i % 2));
    auto got = answered_tokens(r);
    ASSERT_TRUE(got) << round << ": " << r.status << " " << r.body << r.error;
    EXPECT_EQ(*got, reference_tokens(prompts[i])) << round << ", prompt " << i;
  }
}

struct cache_case {
  const char* name;
  const char* config;
  bool vpc;
};

class serving_cache : public ::testing::TestWithParam<cache_case> {};

} // namespace

TEST_P(serving_cache, greedy_tokens_are_the_reference_with_the_cache_cold_and_hot) {
  std::vector<std::array<std::string, 3>> edits = {{"ems", "block_tokens", "16"},
                                                   {"ems", "dram_bytes", "33554432"}};
  if (GetParam().vpc) {
    edits.push_back({"flows", "ems", "\"vpc\""});
    edits.push_back({"ems", "read_path", "\"vpc\""});
  }
  serving_cluster cluster(GetParam().config, tiny_model_dir(), edits);
  ASSERT_TRUE(cluster.up()) << GetParam().config << " did not start";
  const auto prompts = shared_prefix_prompts();

  expect_reference(cluster.port(), prompts, "cold");
  // Stores are asynchronous: wait until every full block of every prompt is in the pool. The
  // five prompts hold 30 full blocks, of which the shared prefixes make some identical.
  auto [stored, ok] = poll_metrics(cluster.port(), [](const std::string& t) {
    return metric_sum(t, "supernode_cache_stored_blocks") >= 20;
  });
  ASSERT_TRUE(ok) << stored;
  EXPECT_EQ(metric_sum(stored, "supernode_cache_store_failures"), 0) << stored;
  const double hits_before = metric_sum(stored, "supernode_cache_hit_tokens");

  expect_reference(cluster.port(), prompts, "hot");
  // Each prompt's first 80 tokens (5 whole blocks; the last token is always computed) now come
  // from the pool.
  const double want = hits_before + 5 * ((prompt_tokens - 1) / cache_block) * cache_block;
  auto [text, hot] = poll_metrics(cluster.port(), [&](const std::string& t) {
    return metric_sum(t, "supernode_cache_hit_tokens") >= want;
  });
  EXPECT_TRUE(hot) << text;
  EXPECT_GT(metric_sum(text, "supernode_pool_blocks"), 0) << text;
}

INSTANTIATE_TEST_SUITE_P(shapes, serving_cache,
                         ::testing::Values(cache_case{"pdc_ems_ub", "pdc-ems.toml", false},
                                           cache_case{"pdc_ems_vpc", "pdc-ems.toml", true},
                                           cache_case{"embedded", "local.toml", false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(serving_cache_fault, a_killed_pool_server_costs_hits_not_answers) {
  // Left dead (the supervisor would restart it): the ring without it is what is tested.
  serving_cluster cluster("pdc-ems.toml", tiny_model_dir(),
                          {{"ems", "block_tokens", "16"}, {"process.ems", "restart", "\"never\""}});
  ASSERT_TRUE(cluster.up());
  const auto prompts = shared_prefix_prompts();
  expect_reference(cluster.port(), prompts, "before the kill");
  pid_t pid = 0;
  std::ifstream(cluster.run_dir() / "pids" / "ems-1.pid") >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // Lookups in flight fail and count as misses; prefill computes what the pool cannot give.
  expect_reference(cluster.port(), prompts, "after the kill");
  auto more = shared_prefix_prompts();
  for (auto& p : more) p.ids.back() ^= 1; // new last tokens: the prefix blocks are unchanged
  expect_reference(cluster.port(), more, "after the ring changed");
}

class serving_cache_replicas : public ::testing::TestWithParam<int> {};

// The context-cache hit tokens of a round of repeated prompts while one of the two pool servers
// is dead, with one copy of every block and with two (the figure:
// ./supernode test -R serving_cache_replicas -V).
TEST_P(serving_cache_replicas, a_killed_pool_server_costs_hits_only_without_a_second_copy) {
  const int replicas = GetParam();
  // Left dead, so the whole round after the kill runs during the outage.
  serving_cluster cluster("pdc-ems.toml", tiny_model_dir(),
                          {{"ems", "block_tokens", "16"},
                           {"ems", "replicas", std::to_string(replicas)},
                           {"process.ems", "restart", "\"never\""}});
  ASSERT_TRUE(cluster.up());
  const auto prompts = shared_prefix_prompts();
  const double rounds_lookups = static_cast<double>(prompts.size());
  expect_reference(cluster.port(), prompts, "cold");
  expect_reference(cluster.port(), prompts, "hot");
  auto blocks_on = [](const std::string& t, const char* server) {
    return metric(t, "supernode_pool_blocks", {{"instance", server}, {"tier", "ssd"}}).value_or(0);
  };
  // Both rounds counted, and with two servers and two copies each server holds every block
  // once the second copies landed.
  auto [before, ok] = poll_metrics(cluster.port(), [&](const std::string& t) {
    return metric_sum(t, "supernode_cache_lookups") >= 2 * rounds_lookups &&
           metric_sum(t, "supernode_cache_stored_blocks") >= 20 &&
           (replicas == 1 || (blocks_on(t, "mp_server-0") > 0 &&
                              blocks_on(t, "mp_server-0") == blocks_on(t, "mp_server-1")));
  });
  ASSERT_TRUE(ok) << before;
  const double hits_before = metric_sum(before, "supernode_cache_hit_tokens");
  const double lookups_before = metric_sum(before, "supernode_cache_lookups");
  pid_t pid = 0;
  std::ifstream(cluster.run_dir() / "pids" / "ems-1.pid") >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  expect_reference(cluster.port(), prompts, "during the outage");
  // A hot round loads each prompt's 5 whole blocks: with two copies half of them come from
  // their second owner, with one the dead server's are computed again.
  const double hot_round = 5 * ((prompt_tokens - 1) / cache_block) * cache_block;
  auto [text, counted] = poll_metrics(cluster.port(), [&](const std::string& t) {
    return metric_sum(t, "supernode_cache_lookups") >= lookups_before + rounds_lookups &&
           (replicas == 1 ||
            metric_sum(t, "supernode_cache_hit_tokens") >= hits_before + hot_round);
  });
  EXPECT_TRUE(counted) << text;
  const double outage_hits = metric_sum(text, "supernode_cache_hit_tokens") - hits_before;
  std::cout << "context-cache hit tokens while mp_server-1 is down, replicas = " << replicas << ": "
            << outage_hits << " of " << hot_round << " = " << outage_hits / hot_round << "\n";
  if (replicas == 2)
    EXPECT_EQ(outage_hits, hot_round);
  else
    EXPECT_LT(outage_hits, hot_round) << "the dead server's blocks were hits with one copy";
}

INSTANTIATE_TEST_SUITE_P(replicas, serving_cache_replicas, ::testing::Values(1, 2),
                         [](const auto& info) { return "replicas_" + std::to_string(info.param); });

namespace {

// A conversation's second turn: its prompt repeats the first prompt and the answer.
struct two_turns {
  served_prompt first;
  std::vector<int32_t> answer;
  served_prompt second;
};

// Hit tokens the second turn got, with decode's generated KV stored or not.
double second_turn_hits(bool store_decode_kv, two_turns& turns) {
  serving_cluster cluster("pdc-ems.toml", tiny_model_dir(),
                          {{"ems", "block_tokens", "16"},
                           {"ems", "store_decode_kv", store_decode_kv ? "true" : "false"},
                           {"process.prefill", "count", "1"}});
  if (!cluster.up()) {
    ADD_FAILURE() << "pdc-ems did not start";
    return -1;
  }
  expect_reference(cluster.port(), {turns.first}, "first turn");
  turns.answer = reference_tokens(turns.first);
  // Everything the first turn may store is stored: the prompt's 2 full blocks, and with decode
  // KV the 2 more full blocks of its 40 + 39 tokens with KV (under decode keys).
  const double stored_want = store_decode_kv ? 4 : 2;
  auto [stored, ok] = poll_metrics(cluster.port(), [&](const std::string& t) {
    return metric_sum(t, "supernode_cache_stored_blocks") >= stored_want;
  });
  EXPECT_TRUE(ok) << stored;
  const double before = metric_sum(stored, "supernode_cache_hit_tokens");
  turns.second.ids = turns.first.ids;
  turns.second.ids.insert(turns.second.ids.end(), turns.answer.begin(), turns.answer.end());
  const auto more = test_prompt(10, 4242);
  turns.second.ids.insert(turns.second.ids.end(), more.begin(), more.end());
  turns.second.max_tokens = 4;
  expect_reference(cluster.port(), {turns.second}, "second turn");
  auto [text, seen] = poll_metrics(cluster.port(), [&](const std::string& t) {
    return metric_sum(t, "supernode_cache_lookups") >= 2;
  });
  EXPECT_TRUE(seen) << text;
  return metric_sum(text, "supernode_cache_hit_tokens") - before;
}

} // namespace

TEST(serving_cache_decode, generated_kv_is_stored_when_the_flag_says_so_but_never_is_a_prefix) {
  two_turns turns;
  turns.first = {test_prompt(40, 31), 40};
  // Off: the second turn finds the first prompt's 2 full blocks only (32 tokens).
  EXPECT_EQ(second_turn_hits(false, turns), 32);
  // On: the answer's KV is stored too (4 blocks), but the decode arithmetic made it, so no
  // prefill loads it as a prompt prefix (its last bits differ from prefill KV): 32 again.
  EXPECT_EQ(second_turn_hits(true, turns), 32);
}

TEST(serving_model_cache,
     instances_starting_together_fetch_the_model_once_and_serve_the_reference) {
  // The bucket is the folder holding the tiny model; its four instances (2 prefill, 2 decode)
  // start together and each loads the model through the pool.
  const auto bucket = std::filesystem::path(tiny_model_dir()).parent_path();
  serving_cluster cluster("pdc-ems.toml", tiny_model_dir(),
                          {{"ems", "model_cache", "true"},
                           {"ems", "object_store", "\"" + bucket.string() + "\""},
                           {"ems", "object_store_bandwidth", "0"},
                           {"ems", "model_block_bytes", "65536"}});
  ASSERT_TRUE(cluster.up());
  expect_reference(cluster.port(), shared_prefix_prompts(), "model from the pool");
  // One instance read the bucket; the other three read the pool.
  int fetched = 0, from_pool = 0;
  std::string pool_lines; // what the instances and the controller said, for a failure
  for (auto& log : std::filesystem::directory_iterator(cluster.run_dir() / "logs")) {
    std::ifstream in(log.path());
    for (std::string line; std::getline(in, line);) {
      if (line.find("model") != std::string::npos || line.find("ring") != std::string::npos)
        pool_lines += line + "\n";
      if (line.find("through the pool") == std::string::npos) continue;
      fetched += line.find("fetched from object storage") != std::string::npos;
      from_pool += line.find("read from the pool") != std::string::npos;
    }
  }
  EXPECT_EQ(fetched, 1) << pool_lines;
  EXPECT_EQ(from_pool, 3) << pool_lines;
}
