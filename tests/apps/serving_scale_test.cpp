// `supernode cluster scale` on a live pdc-2p2d under load: decode 2 → 1 while requests stream
// through decode-1 (it drains: its roles leave and the requests it held resume on decode-0),
// then back to 2, and prefill 2 → 1 → 2; decode groups of lep-ep4 resize, and a new group joins
// past the config and leaves; every request answers with the reference engine's
// tokens, the status says what is serving, and a request after the changes is served.

#include "cluster_cli.hpp"
#include "services/loadgen/http_client.hpp"
#include "serving_faults.hpp"
#include "transport/free_ports.hpp"
#include "transport/private_files.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

using namespace supernode::testing;
using json = nlohmann::json;

namespace {

// Until the scheduler places on `instance`: it is alive and reported its KV pool. A scale
// answers once the process is ready; the scheduler hears of it within a heartbeat or two.
void wait_until_scheduled(const serving_cluster& cluster, const std::string& instance) {
  const auto [text, placed] = poll_metrics(cluster.port(), [&](const std::string& m) {
    const supernode::services::loadgen::metric_labels of{{"instance", instance},
                                                         {"role", "decode"}};
    return metric(m, "supernode_instance_alive", of).value_or(0) == 1 &&
           metric(m, "supernode_kv_blocks_total", of).value_or(0) > 0;
  });
  ASSERT_TRUE(placed) << instance << " never became placeable:\n" << text;
}

// `cluster scale COUNTS` once `busy` holds of the metrics, while `prompts` run; every request
// answers with the reference's tokens, and the scale answers ok (returned).
template<class Busy>
json scale_under_load(serving_cluster& cluster, const std::vector<served_prompt>& prompts,
                      Busy busy, const std::vector<std::string>& counts,
                      bool expect_resumed = true) {
  json answer;
  expect_no_request_lost(
      cluster, prompts, busy, [&] { answer = scale(cluster, counts); }, expect_resumed);
  EXPECT_EQ(answer["ok"], true) << answer.dump();
  return answer;
}

// A `busy` condition: at least `n` sequences run on `instances` together.
auto running_on_all(std::vector<std::string> instances, double n) {
  return [instances = std::move(instances), n](const std::string& m) {
    double running = 0;
    for (auto& i : instances) running += running_on(m, i);
    return running >= n;
  };
}

} // namespace

TEST(serving_scale, decode_and_prefill_scale_down_and_up_under_load_losing_no_request) {
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  json down;
  expect_no_request_lost(
      cluster, workload(8, 40, 160),
      [](const std::string& m) { return running_on(m, "decode-1") >= 2; },
      [&] { down = scale(cluster, {"decode=1"}); });
  ASSERT_EQ(down["ok"], true) << down.dump();
  EXPECT_EQ(down["stopped"], json::array({"decode-1"}));
  EXPECT_EQ(phases(cluster)["decode-1"], "down");
  EXPECT_EQ(pid_of(cluster, "decode-1"), 0) << "a scaled-down slot is not restarted";

  const auto up = scale(cluster, {"decode=2", "prefill=1"});
  ASSERT_EQ(up["ok"], true) << up.dump();
  EXPECT_EQ(up["started"], json::array({"decode-1"}));
  EXPECT_EQ(up["stopped"], json::array({"prefill-1"}));
  auto now = phases(cluster);
  EXPECT_EQ(now["decode-1"], "serving");
  EXPECT_EQ(now["prefill-1"], "down");
  // The cluster serves on its new shape, and again with prefill back to two. The restarted
  // decode-1 must be placeable first, and the requests long enough to be seen running on it.
  wait_until_scheduled(cluster, "decode-1");
  expect_no_request_lost(
      cluster, workload(6, 40, 120),
      [](const std::string& m) { return running_on(m, "decode-1") >= 1; },
      [&] { EXPECT_EQ(scale(cluster, {"prefill=2"})["ok"], true); }, /*expect_resumed=*/false);
  EXPECT_EQ(phases(cluster)["prefill-1"], "serving");
  expect_serves_the_reference(cluster);
}

TEST(serving_scale, decode_beyond_the_config_joins_over_ephemeral_tcp_ports_serves_and_drains) {
  // pdc-2p2d's six config instances take 3 ports each per plane; the joined one takes whatever
  // the kernel gives it.
  const int base = supernode::transport::free_tcp_port_range(36, 29);
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir(), zmq_planes_over_tcp(base, 18));
  ASSERT_TRUE(cluster.up());
  // decode=3 under load: decode-2 is no slot of the config, so it starts with --join, claims
  // the name and announces the ports it bound.
  json up;
  expect_no_request_lost(
      cluster, workload(6, 40, 60),
      [](const std::string& m) {
        return running_on(m, "decode-0") + running_on(m, "decode-1") >= 2;
      },
      [&] { up = scale(cluster, {"decode=3"}); }, /*expect_resumed=*/false);
  ASSERT_EQ(up["ok"], true) << up.dump();
  EXPECT_EQ(up["started"], json::array({"decode-2"}));
  EXPECT_EQ(phases(cluster)["decode-2"], "serving");
  std::stringstream log;
  log << std::ifstream(cluster.run_dir() / "logs" / "decode-2.log").rdbuf();
  EXPECT_NE(log.str().find("ready decode-2"), std::string::npos) << log.str();
  // A kind whose processes cannot join is held to its slots, and says why.
  expect_scale_refused(cluster, {"gateway=2"}, "more than one role");

  // It takes requests, and draining it (decode=2) loses none of them.
  json down;
  expect_no_request_lost(
      cluster, workload(8, 40, 160),
      [](const std::string& m) { return running_on(m, "decode-2") >= 1; },
      [&] { down = scale(cluster, {"decode=2"}); });
  ASSERT_EQ(down["ok"], true) << down.dump();
  EXPECT_EQ(down["stopped"], json::array({"decode-2"}));
  EXPECT_EQ(phases(cluster)["decode-2"], "down");
  expect_serves_the_reference(cluster);
}

// Sequences that arrived at some decode instance with their KV from a draining one.
double sequences_moved_in(const std::string& metrics) {
  double n = 0;
  for (int i = 0; i < 4; ++i)
    n += metric(metrics, "supernode_sequences_moved",
                {{"instance", "decode-" + std::to_string(i)}, {"direction", "in"}})
             .value_or(0.0);
  return n;
}

TEST(serving_scale, decode_two_to_four_to_one_moves_running_sequences_with_their_kv_or_finishes) {
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  const auto up = scale(cluster, {"decode=4"}); // decode-2 and decode-3 join
  ASSERT_EQ(up["ok"], true) << up.dump();
  EXPECT_EQ(up["started"], json::array({"decode-2", "decode-3"}));
  for (auto* joined : {"decode-2", "decode-3"}) wait_until_scheduled(cluster, joined);

  // 4 -> 1 while sequences run on the three that go: each moves, with its KV, to decode-0 and
  // goes on there token for token (the gateway places it again naming its KV's holder).
  json down;
  expect_no_request_lost(
      cluster, workload(10, 40, 160),
      [](const std::string& m) {
        return running_on(m, "decode-1") + running_on(m, "decode-2") + running_on(m, "decode-3") >=
               3;
      },
      [&] {
        down = scale(cluster, {"decode=1", "--drain", "migrate"});
      });
  ASSERT_EQ(down["ok"], true) << down.dump();
  EXPECT_EQ(down["stopped"], json::array({"decode-1", "decode-2", "decode-3"}));
  EXPECT_EQ(down["drain_killed"], false) << "every move finished within the drain timeout";
  auto metrics = http_call(cluster.port(), "GET", "/metrics").body;
  const double moved = sequences_moved_in(metrics);
  EXPECT_GT(moved, 0.0) << "no sequence moved with its KV:\n" << metrics;

  // 2 -> 1 with drain = "finish": decode-1 takes nothing new and ends what it runs; nothing is
  // placed again and nothing moves.
  ASSERT_EQ(scale(cluster, {"decode=2"})["ok"], true);
  wait_until_scheduled(cluster, "decode-1");
  const double resumed_before = metric_sum(metrics, "supernode_requests_resumed_total");
  json finish;
  expect_no_request_lost(
      cluster, workload(16, 40, 160),
      [](const std::string& m) { return running_on(m, "decode-1") >= 1; },
      [&] {
        finish = scale(cluster, {"decode=1", "--drain", "finish"});
      },
      /*expect_resumed=*/false);
  ASSERT_EQ(finish["ok"], true) << finish.dump();
  EXPECT_EQ(finish["drain_killed"], false);
  metrics = http_call(cluster.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric_sum(metrics, "supernode_requests_resumed_total"), resumed_before)
      << "a finishing drain placed a request again";
  EXPECT_EQ(sequences_moved_in(metrics), moved);
  EXPECT_EQ(phases(cluster)["decode-1"], "down");
  expect_serves_the_reference(cluster);
}

// Prompt tokens assigned to a prefill instance and not yet done, or in its batch.
double prefill_work_on(const std::string& metrics, const std::string& instance) {
  const supernode::services::loadgen::metric_labels of{{"instance", instance}, {"role", "prefill"}};
  return metric(metrics, "supernode_prefill_outstanding_tokens", of).value_or(0) +
         metric(metrics, "supernode_instance_running", of).value_or(0);
}

TEST(serving_scale, prefill_one_to_three_to_one_with_a_process_beyond_the_config_under_load) {
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  ASSERT_EQ(scale(cluster, {"prefill=1"})["ok"], true);
  // 1 -> 3 while prompts arrive: prefill-1 starts again, prefill-2 joins.
  json up;
  expect_no_request_lost(
      cluster, workload(12, 300, 20),
      [](const std::string& m) { return prefill_work_on(m, "prefill-0") > 0; },
      [&] { up = scale(cluster, {"prefill=3"}); }, /*expect_resumed=*/false);
  ASSERT_EQ(up["ok"], true) << up.dump();
  EXPECT_EQ(up["started"], json::array({"prefill-1", "prefill-2"}));
  EXPECT_EQ(phases(cluster)["prefill-2"], "serving");
  // The joined one takes prompts; 3 -> 1 while it and prefill-1 hold some loses none of them.
  json down;
  expect_no_request_lost(
      cluster, workload(16, 300, 20),
      [](const std::string& m) { return prefill_work_on(m, "prefill-2") > 0; },
      [&] { down = scale(cluster, {"prefill=1"}); }, /*expect_resumed=*/false);
  ASSERT_EQ(down["ok"], true) << down.dump();
  EXPECT_EQ(down["stopped"], json::array({"prefill-1", "prefill-2"}));
  EXPECT_EQ(phases(cluster)["prefill-2"], "down");
  expect_serves_the_reference(cluster);
}

// One slot's entry of `cluster status --json`.
json status_of(const serving_cluster& cluster, const std::string& slot) {
  const auto status = cluster_cli(cluster, "status", {});
  for (auto& p : status["processes"])
    if (p["process"] == slot) return p;
  return {};
}

TEST(serving_scale, a_prefill_process_switches_to_decode_and_back_in_place_under_load) {
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  const auto pid = status_of(cluster, "prefill-1")["pid"];
  // prefill 2 -> 1 and decode 2 -> 3 by switching: prefill-1 finishes the prompts it holds and
  // serves as decode-2, in the same process on the same model copy.
  json to_decode;
  expect_no_request_lost(
      cluster, workload(12, 300, 20),
      [](const std::string& m) { return prefill_work_on(m, "prefill-1") > 0; },
      [&] {
        to_decode = scale(cluster, {"prefill=1", "decode=3", "--switch"});
      },
      /*expect_resumed=*/false);
  ASSERT_EQ(to_decode["ok"], true) << to_decode.dump();
  EXPECT_EQ(to_decode["switched"], json::array({"prefill-1"}));
  EXPECT_EQ(to_decode["stopped"], json::array());
  auto slot = status_of(cluster, "prefill-1");
  EXPECT_EQ(slot["pid"], pid) << "the switch restarted the process";
  EXPECT_EQ(slot["serves"], "decode");
  EXPECT_EQ(slot["instances"], json::array({"decode-2"}));
  wait_until_scheduled(cluster, "decode-2");

  // And back while sequences run on it: they move with their KV (the default drain, migrate).
  json to_prefill;
  expect_no_request_lost(
      cluster, workload(10, 40, 160),
      [](const std::string& m) { return running_on(m, "decode-2") >= 1; },
      [&] {
        to_prefill = scale(cluster, {"prefill=2", "decode=2", "--switch"});
      });
  ASSERT_EQ(to_prefill["ok"], true) << to_prefill.dump();
  EXPECT_EQ(to_prefill["switched"], json::array({"prefill-1"}));
  slot = status_of(cluster, "prefill-1");
  EXPECT_EQ(slot["pid"], pid);
  EXPECT_EQ(slot["serves"], "prefill");
  EXPECT_EQ(slot["instances"], json::array({"prefill-2"}));
  const auto metrics = http_call(cluster.port(), "GET", "/metrics").body;
  EXPECT_GT(sequences_moved_in(metrics), 0.0) << "nothing moved off decode-2:\n" << metrics;
  expect_serves_the_reference(cluster);
}

TEST(serving_scale, an_expert_parallel_decode_group_goes_from_4_ranks_to_2_and_back_under_load) {
  serving_cluster cluster("lep-ep4.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  // 4 -> 2: decode-2 and decode-3 drain (their sequences move with their KV to the ranks that
  // stay) and leave; the group re-forms over decode-0 and decode-1 at a step boundary.
  const auto down = scale_under_load(cluster, workload(8, 40, 120),
                                     running_on_all({"decode-2", "decode-3"}, 2), {"decode=2"});
  EXPECT_EQ(down["stopped"], json::array({"decode-2", "decode-3"}));
  // 2 -> 4 under load: the new ranks join the group and take sequences again.
  scale_under_load(cluster, workload(8, 40, 120), running_on_all({"decode-0"}, 1), {"decode=4"},
                   /*expect_resumed=*/false);
  for (auto* rank : {"decode-2", "decode-3"}) wait_until_scheduled(cluster, rank);
  expect_no_request_lost(
      cluster, workload(8, 40, 60), running_on_all({"decode-3"}, 1), [] {},
      /*expect_resumed=*/false);
  expect_serves_the_reference(cluster);
}

TEST(serving_scale, a_whole_decode_group_of_lep_goes_and_comes_back_under_load) {
  // Two decode instances of 4 ranks each (decode-0..3 and decode-4..7).
  serving_cluster cluster("lep-ep4.toml", tiny_model_dir(), {{"process.decode", "count", "8"}});
  ASSERT_TRUE(cluster.up());
  // Up means every process is ready; the scheduler places on the second group once it has
  // heard it formed (on a loaded machine, after the first requests would have been placed).
  for (auto* rank : {"decode-4", "decode-7"}) wait_until_scheduled(cluster, rank);
  // 8 -> 4: the second group's four ranks drain; its sequences move with their KV to the first.
  const auto down = scale_under_load(cluster, workload(8, 40, 120), running_on_all({"decode-4"}, 1),
                                     {"decode=4"});
  EXPECT_EQ(down["stopped"], json::array({"decode-4", "decode-5", "decode-6", "decode-7"}));
  // 4 -> 8: the group forms again from its config slots and takes sequences.
  scale_under_load(cluster, workload(8, 40, 120), running_on_all({"decode-0"}, 1), {"decode=8"},
                   /*expect_resumed=*/false);
  wait_until_scheduled(cluster, "decode-4");
  expect_no_request_lost(
      cluster, workload(8, 40, 60), running_on_all({"decode-4"}, 1), [] {},
      /*expect_resumed=*/false);
  expect_serves_the_reference(cluster);
}

TEST(serving_scale, expert_shards_of_the_attention_moe_split_go_from_4_to_2_to_6_under_load) {
  serving_cluster cluster("split-attn-moe.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  // The attention ranks keep every sequence; the experts of the shards that go are placed on
  // the two that stay when the group re-forms, then spread over six: two shards join beyond the
  // config (expert_shard-4 and -5) and the group takes them in as expert hosts.
  json down, up;
  expect_no_request_lost(
      cluster, workload(8, 40, 120),
      [](const std::string& m) { return running_on(m, "decode-0") >= 1; },
      [&] { down = scale(cluster, {"experts=2"}); }, /*expect_resumed=*/false);
  ASSERT_EQ(down["ok"], true) << down.dump();
  EXPECT_EQ(down["stopped"], json::array({"experts-2", "experts-3"}));
  expect_no_request_lost(
      cluster, workload(8, 40, 120),
      [](const std::string& m) { return running_on(m, "decode-0") >= 1; },
      [&] { up = scale(cluster, {"experts=6"}); }, /*expect_resumed=*/false);
  ASSERT_EQ(up["ok"], true) << up.dump();
  EXPECT_EQ(up["started"], json::array({"experts-2", "experts-3", "experts-4", "experts-5"}));
  EXPECT_TRUE(logs_eventually_contain(cluster.run_dir(), "over 8 ranks (2 of them joined shards)"))
      << "the group never took the joined shards in:\n"
      << log_digest(cluster.run_dir());
  expect_serves_the_reference(cluster);
}

TEST(serving_scale, the_admin_api_needs_its_token_and_answers_repeats_and_conflicts) {
  // The token file is private, like an API keys file; the gateway refuses to start otherwise.
  const auto tokens = std::filesystem::temp_directory_path() /
                      ("supernode-admin-" + std::to_string(::getpid()) + ".tokens");
  supernode::transport::write_private_file(tokens, "s3cret-admin-token name=ops\n");
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir(),
                          {{"gateway", "admin_token_file", "\"" + tokens.string() + "\""}});
  std::filesystem::remove(tokens); // read at start
  ASSERT_TRUE(cluster.up());
  supernode::services::loadgen::http_url url;
  url.host = "127.0.0.1";
  url.port = std::to_string(cluster.port());
  auto post = [&](const json& body, const std::string& token = "s3cret-admin-token") {
    return supernode::services::loadgen::http_request(url, "POST", "/admin/scale", body.dump(),
                                                      std::chrono::seconds(300), "application/json",
                                                      token);
  };
  const json one{{"counts", {{"prefill", 1}}}, {"operation_id", "shrink-1"}};
  EXPECT_EQ(post(one, "").status, 401u);
  EXPECT_EQ(post(one, "guess").status, 401u);
  EXPECT_EQ(post({{"counts", "all"}}).status, 400u);
  // The gateway's process hosts two roles: it cannot have more processes than its slot.
  const auto too_many = post({{"counts", {{"gateway", 2}}}});
  EXPECT_EQ(too_many.status, 400u);
  EXPECT_NE(too_many.body.find("1 slot(s)"), std::string::npos) << too_many.body;
  EXPECT_EQ(phases(cluster)["prefill-1"], "serving") << "a refused call changes nothing";

  const auto done = post(one);
  ASSERT_EQ(done.status, 200u) << done.body;
  EXPECT_EQ(json::parse(done.body)["stopped"], json::array({"prefill-1"}));
  EXPECT_EQ(phases(cluster)["prefill-1"], "down");
  const auto repeat = post(one);
  EXPECT_EQ(repeat.status, 200u);
  EXPECT_EQ(repeat.body, done.body) << "a repeated operation id answers what the first did";
  EXPECT_EQ(post({{"counts", {{"prefill", 2}}}, {"operation_id", "shrink-1"}}).status, 409u);

  const auto back = post({{"counts", {{"prefill", 2}}}, {"operation_id", "grow-1"}});
  ASSERT_EQ(back.status, 200u) << back.body;
  EXPECT_EQ(phases(cluster)["prefill-1"], "serving");
  expect_serves_the_reference(cluster);
}

// The logs of `slots`, as one text (a joined slot's process may hold another joined name than
// its slot's, so a test looks through the slots of a group together).
std::string logs_of(const serving_cluster& cluster, const std::vector<std::string>& slots) {
  std::stringstream text;
  for (auto& slot : slots)
    text << std::ifstream(cluster.run_dir() / "logs" / (slot + ".log")).rdbuf();
  return text.str();
}

TEST(serving_scale, a_new_decode_group_joins_past_the_config_serves_and_leaves_under_load) {
  // lep-ep4 with groups of 2 ranks: decode-0..1 are the config's one group.
  serving_cluster cluster("lep-ep4.toml", tiny_model_dir(),
                          {{"process.decode", "count", "2"}, {"ep", "decode_ranks", "2"}});
  ASSERT_TRUE(cluster.up());
  expect_scale_refused(cluster, {"decode=3"}, "whole expert-parallel groups of 2");
  // 2 -> 4 under load: decode-2 and decode-3 join as a second group of 2 ranks, formed over
  // shared memory by their names, and take sequences.
  const auto up = scale_under_load(cluster, workload(8, 40, 120), running_on_all({"decode-0"}, 1),
                                   {"decode=4"}, /*expect_resumed=*/false);
  EXPECT_EQ(up["started"], json::array({"decode-2", "decode-3"}));
  for (auto* rank : {"decode-2", "decode-3"}) wait_until_scheduled(cluster, rank);
  // Each forms over itself when it is up and grows when it sees its partner: both ranks say so.
  std::string joined;
  const bool formed = eventually(
      [&] {
        joined = logs_of(cluster, {"decode-2", "decode-3"});
        static const std::regex both("decode-ep1 (re-)?formed over 2 of 2 ranks");
        return std::distance(std::sregex_iterator(joined.begin(), joined.end(), both),
                             std::sregex_iterator()) == 2;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(20));
  EXPECT_TRUE(formed) << "the joined group never formed over both its ranks:\n" << joined;
  expect_no_request_lost(
      cluster, workload(8, 40, 60), running_on_all({"decode-2", "decode-3"}, 1), [] {},
      /*expect_resumed=*/false);
  // 4 -> 2: the joined group drains, its sequences move with their KV to the config's group.
  // Requests twice as long as the others here: the scale must reach the leaving ranks before
  // their sequences end, and under a loaded suite 120 tokens once ended first.
  const auto down = scale_under_load(cluster, workload(8, 40, 240),
                                     running_on_all({"decode-2", "decode-3"}, 1), {"decode=2"});
  EXPECT_EQ(down["stopped"], json::array({"decode-2", "decode-3"}));
  EXPECT_EQ(phases(cluster)["decode-3"], "down");
  expect_serves_the_reference(cluster);
}
