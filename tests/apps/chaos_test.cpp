// `supernode chaos` end to end with the tiny model: on pdc-1p1d a plan that drops 10 % of every
// process's control frames for 2 s, on pdc-2p2d one that kills a decode process, each under a
// spread-out load. Whether every request survives is the system's business (and not asserted
// here); the runner's is to fire the fault (the processes' logs count the frames they dropped;
// the kill is seen), bring the cluster down, and report every field, within a bound.

// clang-format off
#include <csignal> // before serving_cluster.hpp, which signals its server
// clang-format on
#include "../model/tiny_model.hpp"
#include "../support/child_process.hpp"
#include "../support/serving_cluster.hpp"
#include "../support/test_run_dir.hpp"
#include "services/cluster/cluster_file.hpp"

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <unistd.h>

using namespace supernode::testing;
namespace fs = std::filesystem;

namespace {

constexpr const char* drop_control_plan = R"(
[[fault]]
at_s = 0.5
kind = "drop"
flow = "control"
duration_s = 2.0
rate = 0.1
)";

// Frames the processes' injectors dropped, from their "faults_injected N of M frames" lines.
uint64_t frames_dropped(const fs::path& logs) {
  const std::regex line(R"(fault injection: drop on control ended: faults_injected (\d+) of)");
  uint64_t dropped = 0;
  for (const auto& entry : fs::directory_iterator(logs)) {
    std::ifstream in(entry.path());
    for (std::string text; std::getline(in, text);)
      if (std::smatch m; std::regex_search(text, m, line)) dropped += std::stoull(m[1]);
  }
  return dropped;
}

// A config of configs/ with its own name, run folder, a free port and the tests' heartbeat
// bound, in `run_dir`.
fs::path own_config(const std::string& config, const fs::path& run_dir,
                    const std::vector<std::array<std::string, 3>>& edits = {}) {
  auto file = supernode::services::cluster::cluster_file::read(fs::path(SUPERNODE_SOURCE_DIR) /
                                                               "configs" / config);
  file.own_cluster("chaos-t" + std::to_string(::getpid()), run_dir / "run")
      .set("gateway", "port", "0")
      .set("cluster", "missed_heartbeats", test_missed_heartbeats);
  for (auto& [table, key, value] : edits) file.set(table, key, value);
  const auto path = run_dir / config;
  file.write(path);
  return path;
}

struct chaos_result {
  std::optional<supernode::services::cluster::exit_status> status;
  std::string out;
  nlohmann::json report;
};

// `supernode chaos` with `args` after the config, plan and model; its stdout parsed, within
// `bound`.
chaos_result run_chaos(const fs::path& config, const fs::path& plan,
                       const std::vector<std::string>& args, std::chrono::seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  std::vector<std::string> argv{serving_cluster::binary(),
                                "chaos",
                                "--config",
                                config.string(),
                                "--faults",
                                plan.string(),
                                "--model",
                                tiny_model_dir().string(),
                                "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  child_process chaos(argv);
  chaos_result r;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto line = chaos.read_line(left);
    if (!line) break; // the end of its output (or the deadline)
    r.out += *line + "\n";
  }
  if (std::chrono::steady_clock::now() < deadline) r.status = chaos.wait(std::chrono::seconds(30));
  r.report = nlohmann::json::parse(r.out, nullptr, false);
  return r;
}

void expect_full_report(const chaos_result& r, int requests) {
  ASSERT_TRUE(r.status) << "supernode chaos did not end within its bound; output so far:\n"
                        << r.out;
  // 0: nothing lost; 1: the report says what was. Anything else is the runner failing.
  EXPECT_TRUE(r.status->exited() && (r.status->code() == 0 || r.status->code() == 1)) << r.out;
  ASSERT_TRUE(r.report.is_object()) << "stdout is not one JSON object:\n" << r.out;
  for (const char* key : {"requests", "succeeded", "failed", "mismatched", "duplicated_tokens",
                          "faults", "ttft_ms", "tpot_ms"})
    EXPECT_TRUE(r.report.contains(key)) << key << " missing from\n" << r.out;
  EXPECT_EQ(r.report["requests"], requests);
  EXPECT_EQ(r.report["succeeded"].get<int>() + r.report["failed"].get<int>(), requests);
  EXPECT_EQ(r.status->code() == 0, r.report["failed"] == 0 && r.report["mismatched"] == 0 &&
                                       r.report["duplicated_tokens"] == 0);
  for (const auto& fault : r.report["faults"])
    for (const char* key : {"kind", "target", "at_s", "detected_s", "recovered_s"})
      EXPECT_TRUE(fault.contains(key)) << key;
  for (const char* metric : {"ttft_ms", "tpot_ms"})
    for (const char* phase : {"before", "during", "after"})
      for (const char* stat : {"requests", "p50", "p99"})
        EXPECT_TRUE(r.report[metric][phase].contains(stat))
            << metric << "." << phase << "." << stat;
}

void expect_cluster_down(const fs::path& run_dir) {
  for (const auto& entry : fs::directory_iterator(run_dir / "pids"))
    ADD_FAILURE() << "left running: " << entry.path();
}

} // namespace

TEST(chaos_run, a_control_drop_plan_runs_to_a_full_report_within_its_bound) {
  const supernode::testing::test_run_dir dir("chaos");
  const auto config = own_config("pdc-1p1d.toml", dir.path());
  const auto plan = dir.path() / "drop-control.toml";
  std::ofstream(plan) << drop_control_plan;
  const auto r = run_chaos(config, plan,
                           {"--num-prompts", "16", "--concurrency", "4", "--max-tokens", "8",
                            "--request-rate", "6", "--timeout-s", "20", "--recovery-wait-s", "10"},
                           std::chrono::seconds(240));
  expect_full_report(r, 16);
  if (HasFatalFailure()) return;
  ASSERT_EQ(r.report["faults"].size(), 1u);
  EXPECT_EQ(r.report["faults"][0]["kind"], "drop");
  EXPECT_EQ(r.report["faults"][0]["at_s"], 0.5);
  // The fault really fired inside the processes, and the cluster is down again.
  EXPECT_GT(frames_dropped(dir.path() / "run" / "logs"), 0u);
  expect_cluster_down(dir.path() / "run");
}

TEST(chaos_run, a_killed_decode_process_is_signalled_and_its_detection_timed) {
  const supernode::testing::test_run_dir dir("chaos");
  const auto config = own_config("pdc-2p2d.toml", dir.path());
  const auto plan = dir.path() / "kill-decode.toml";
  std::ofstream(plan) << "[[fault]]\nat_s = 1.0\nkind = \"kill\"\ntarget = \"decode-1\"\n";
  const auto r = run_chaos(config, plan,
                           {"--num-prompts", "24", "--concurrency", "4", "--max-tokens", "8",
                            "--request-rate", "6", "--timeout-s", "20", "--recovery-wait-s", "5"},
                           std::chrono::seconds(240));
  expect_full_report(r, 24);
  if (HasFatalFailure()) return;
  ASSERT_EQ(r.report["faults"].size(), 1u);
  const auto& kill = r.report["faults"][0];
  EXPECT_EQ(kill["kind"], "kill");
  EXPECT_EQ(kill["target"], "decode-1");
  EXPECT_FALSE(kill.contains("note")) << kill.dump(); // it fired
  // The gateway (or the supervisor's log) saw it go, after the signal. Whether it came back,
  // and whether its requests survived, is the recovery work's to show.
  ASSERT_TRUE(kill["detected_s"].is_number()) << kill.dump();
  EXPECT_GE(kill["detected_s"].get<double>(), 1.0);
  if (kill["recovered_s"].is_number()) {
    EXPECT_GE(kill["recovered_s"].get<double>(), kill["detected_s"].get<double>());
  }
  expect_cluster_down(dir.path() / "run");
}

TEST(chaos_run, a_killed_gateway_of_two_loses_nothing_at_a_retrying_client) {
  // pdc-ha: two gateways and the scheduler on its own. Every first attempt goes to gateway-0;
  // killed, its open requests fail on a connection error and are resubmitted to gateway-1, as
  // are the ones sent while it restarts (on a new port: the tests' gateways take any free one).
  const supernode::testing::test_run_dir dir("chaos");
  const auto config = own_config("pdc-ha.toml", dir.path());
  const auto plan = dir.path() / "kill-gateway.toml";
  std::ofstream(plan) << "[[fault]]\nat_s = 1.0\nkind = \"kill\"\ntarget = \"gateway-0\"\n";
  const auto r = run_chaos(config, plan,
                           {"--num-prompts", "24", "--concurrency", "4", "--max-tokens", "16",
                            "--request-rate", "6", "--timeout-s", "30", "--recovery-wait-s", "5",
                            "--retry", "3"},
                           std::chrono::seconds(240));
  expect_full_report(r, 24);
  if (HasFatalFailure()) return;
  EXPECT_EQ(r.status->code(), 0) << r.out;
  EXPECT_EQ(r.report["failed"], 0) << r.out;
  EXPECT_EQ(r.report["mismatched"], 0) << r.out;
  EXPECT_EQ(r.report["duplicated_tokens"], 0) << r.out;
  EXPECT_GT(r.report["retried"].get<int>(), 0) << "the kill hit no request:\n" << r.out;
  ASSERT_EQ(r.report["faults"].size(), 1u);
  EXPECT_TRUE(r.report["faults"][0]["detected_s"].is_number()) << r.out;
  expect_cluster_down(dir.path() / "run");
}

TEST(chaos_run, every_plane_and_storage_fault_ends_in_a_recovery_never_a_hang_or_a_crash) {
  // pdc-ems under one plan of every frame fault, one after another, and an MP server's full
  // disk: control frames dropped (lost token updates: a gap, or a stall, places the request
  // again), duplicated (each token index is applied once), KV frames corrupted (refused by the
  // frame checks: the prefill is retried), pool frames delayed, SSD writes failing. The run
  // ends within its bound, no process crashes, and every request ends with the reference's
  // tokens (a frame lost before the first token is noticed at the first-token bound).
  const supernode::testing::test_run_dir dir("chaos");
  // A lost frame is noticed by the gateway's bounds (no first token, a stalled stream): short
  // here, so the retries fit the clients' deadline.
  const auto config = own_config(
      "pdc-ems.toml", dir.path(),
      {{"gateway", "first_token_timeout_ms", "6000"}, {"gateway", "stall_timeout_ms", "3000"}});
  const auto plan = dir.path() / "planes.toml";
  std::ofstream(plan) << R"(
[[fault]]
at_s = 0.5
kind = "drop"
flow = "control"
duration_s = 1.0
rate = 0.2
[[fault]]
at_s = 1.5
kind = "duplicate"
flow = "control"
duration_s = 1.0
rate = 0.2
[[fault]]
at_s = 2.5
kind = "corrupt"
flow = "bulk"
duration_s = 1.0
rate = 0.2
[[fault]]
at_s = 3.5
kind = "delay"
flow = "ems"
duration_s = 1.0
delay_ms = 300
[[fault]]
at_s = 4.5
kind = "disk_full"
target = "mp_server-0"
duration_s = 1.0
)";
  const auto r =
      run_chaos(config, plan,
                {"--num-prompts", "48", "--concurrency", "4", "--max-tokens", "12", "--input-len",
                 "100", "--request-rate", "8", "--timeout-s", "60", "--recovery-wait-s", "5"},
                std::chrono::seconds(300));
  expect_full_report(r, 48);
  if (HasFatalFailure()) return;
  EXPECT_EQ(r.report["faults"].size(), 5u);
  EXPECT_EQ(r.report["failed"], 0) << r.out;
  EXPECT_EQ(r.report["mismatched"], 0) << r.out;
  EXPECT_EQ(r.report["duplicated_tokens"], 0) << r.out;
  std::ifstream events(dir.path() / "run" / "events.jsonl");
  for (std::string line; std::getline(events, line);)
    EXPECT_EQ(line.find("\"exited\""), std::string::npos) << "a process ended: " << line;
  expect_cluster_down(dir.path() / "run");
}
