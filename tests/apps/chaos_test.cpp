// `supernode chaos` end to end on pdc-1p1d with the tiny model: a plan that drops 10 % of every
// process's control frames for 2 s while a spread-out load runs. Whether every request survives
// is the system's business (and not asserted here); the runner's is to fire the fault (the
// processes' logs count what they dropped), bring the cluster down, and report every field,
// within a bound.

// clang-format off
#include <csignal> // before serving_cluster.hpp, which signals its server
// clang-format on
#include "../model/tiny_model.hpp"
#include "../support/child_process.hpp"
#include "../support/serving_cluster.hpp"
#include "services/cluster/cluster_file.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
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

} // namespace

TEST(chaos_run, a_control_drop_plan_runs_to_a_full_report_within_its_bound) {
  const auto run_dir =
      fs::temp_directory_path() / ("supernode-chaos-test-" + std::to_string(::getpid()));
  fs::create_directories(run_dir);
  auto file = supernode::services::cluster::cluster_file::read(fs::path(SUPERNODE_SOURCE_DIR) /
                                                               "configs" / "pdc-1p1d.toml");
  file.own_cluster("chaos-t" + std::to_string(::getpid()), run_dir / "run")
      .set("gateway", "port", "0")
      .set("cluster", "missed_heartbeats", test_missed_heartbeats);
  const auto config = run_dir / "pdc-1p1d.toml";
  file.write(config);
  const auto plan = run_dir / "drop-control.toml";
  std::ofstream(plan) << drop_control_plan;

  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + std::chrono::seconds(240);
  child_process chaos({serving_cluster::binary(),
                       "chaos",
                       "--config",
                       config.string(),
                       "--faults",
                       plan.string(),
                       "--model",
                       tiny_model_dir().string(),
                       "--num-prompts",
                       "16",
                       "--concurrency",
                       "4",
                       "--max-tokens",
                       "8",
                       "--request-rate",
                       "6",
                       "--timeout-s",
                       "20",
                       "--recovery-wait-s",
                       "10",
                       "--json"});
  std::string out;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto line = chaos.read_line(left);
    if (!line) break; // the end of its output (or the deadline)
    out += *line + "\n";
  }
  const auto status = chaos.wait(std::chrono::seconds(30));
  ASSERT_TRUE(status) << "supernode chaos did not end within its bound; output so far:\n" << out;
  ASSERT_LT(std::chrono::steady_clock::now(), deadline);
  // 0: nothing lost; 1: the report says what was. Anything else is the runner failing.
  EXPECT_TRUE(status->exited() && (status->code() == 0 || status->code() == 1)) << out;

  const auto report = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << "stdout is not one JSON object:\n" << out;
  for (const char* key : {"requests", "succeeded", "failed", "mismatched", "duplicated_tokens",
                          "faults", "ttft_ms", "tpot_ms"})
    EXPECT_TRUE(report.contains(key)) << key << " missing from\n" << out;
  EXPECT_EQ(report["requests"], 16);
  EXPECT_EQ(report["succeeded"].get<int>() + report["failed"].get<int>(), 16);
  EXPECT_EQ(status->code() == 0,
            report["failed"] == 0 && report["mismatched"] == 0 && report["duplicated_tokens"] == 0);
  ASSERT_EQ(report["faults"].size(), 1u);
  const auto& fault = report["faults"][0];
  EXPECT_EQ(fault["kind"], "drop");
  EXPECT_EQ(fault["at_s"], 0.5);
  for (const char* key : {"target", "detected_s", "recovered_s"}) EXPECT_TRUE(fault.contains(key));
  for (const char* metric : {"ttft_ms", "tpot_ms"})
    for (const char* phase : {"before", "during", "after"})
      for (const char* stat : {"requests", "p50", "p99"})
        EXPECT_TRUE(report[metric][phase].contains(stat)) << metric << "." << phase << "." << stat;
  // The fault really fired inside the processes, and the cluster is down again.
  EXPECT_GT(frames_dropped(run_dir / "run" / "logs"), 0u);
  for (const auto& entry : fs::directory_iterator(run_dir / "run" / "pids"))
    ADD_FAILURE() << "left running: " << entry.path();

  if (const char* keep = std::getenv("SUPERNODE_KEEP_TEST_RUN_DIR"); keep && *keep == '1') return;
  std::error_code ec;
  fs::remove_all(run_dir, ec);
}
