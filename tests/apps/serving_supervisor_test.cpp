// `cluster up` under its supervisor, with real roles: a SIGKILLed decode process is started
// again as a fresh `supernode role` process (a new pid in its pid file, "ready" in its log), the
// event log says so, the dead one's shm segments are gone, `cluster status` asks the supervisor,
// and the cluster serves the reference tokens again.

#include "../support/eventually.hpp"
#include "services/cluster/role_launch.hpp"
#include "services/serving/cluster_file.hpp"
#include "serving_fixture.hpp"
#include "transport/shm_segment.hpp"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

using namespace supernode::testing;
using namespace supernode;

namespace {

std::vector<nlohmann::json> events_of(const serving_cluster& cluster) {
  std::vector<nlohmann::json> out;
  std::ifstream in(cluster.run_dir() / "events.jsonl");
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

pid_t pid_of(const serving_cluster& cluster, const std::string& slot) {
  pid_t pid = 0;
  std::ifstream(cluster.run_dir() / "pids" / (slot + ".pid")) >> pid;
  return pid;
}

// `cluster status` output and exit code.
std::pair<std::string, int> status_of(const serving_cluster& cluster) {
  child_process status(
      {serving_cluster::binary(), "cluster", "status", "--config", cluster.config_file().string()});
  std::string text;
  while (auto line = status.read_line(std::chrono::seconds(30))) text += *line + "\n";
  auto done = status.wait(std::chrono::seconds(30));
  return {text, done ? done->shell_code() : -1};
}

} // namespace

TEST(serving_supervisor, a_killed_decode_process_is_restarted_and_serves_again) {
  serving_cluster cluster("pdc-1p1d.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  const served_prompt p{test_prompt(40, 9), 8};
  auto first =
      answered_tokens(http_call(cluster.port(), "POST", "/v1/completions", completion_body(p)));
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, reference_tokens(p));

  auto [status, code] = status_of(cluster);
  EXPECT_EQ(code, 0) << status;
  EXPECT_NE(status.find("decode-0"), std::string::npos) << status;
  EXPECT_NE(status.find("restarts 0"), std::string::npos) << status;

  const pid_t killed = pid_of(cluster, "decode-0");
  ASSERT_GT(killed, 0);
  ASSERT_EQ(::kill(killed, SIGKILL), 0);
  // Back as a new process: ready in the event log with the pid its pid file names.
  auto restarted_ready = [&] {
    for (auto& e : events_of(cluster))
      if (e["process"] == "decode-0" && e["event"] == "ready" && e["pid"] != killed &&
          e["pid"] == pid_of(cluster, "decode-0"))
        return true;
    return false;
  };
  ASSERT_TRUE(eventually(restarted_ready, scaled(std::chrono::milliseconds(60000))))
      << events_of(cluster).size() << " events";
  const pid_t restarted = pid_of(cluster, "decode-0");
  EXPECT_NE(restarted, killed);
  EXPECT_TRUE(services::cluster::has_line_starting(
      services::cluster::read_text_file(cluster.run_dir() / "logs" / "decode-0.log"), "ready"));

  // exited (SIGKILL), restarting (attempt 1), spawned and ready, in that order.
  std::vector<std::string> story;
  for (auto& e : events_of(cluster))
    if (e["process"] == "decode-0") story.push_back(e["event"].get<std::string>());
  const std::vector<std::string> expected{"spawned",    "ready",   "exited",
                                          "restarting", "spawned", "ready"};
  EXPECT_EQ(story, expected);
  for (auto& e : events_of(cluster)) {
    if (e["process"] == "decode-0" && e["event"] == "exited") {
      EXPECT_EQ(e["signal"], "SIGKILL");
    }
  }

  // The dead process left no segment behind: every one left has a live creator.
  const auto name = services::cluster_file::load(cluster.config_file()).cluster.name;
  EXPECT_EQ(transport::cleanup_stale_segments(name), 0u);

  std::tie(status, code) = status_of(cluster);
  EXPECT_NE(status.find("restarts 1"), std::string::npos) << status;
  EXPECT_NE(status.find("last exit SIGKILL"), std::string::npos) << status;

  // The scheduler hears of the new incarnation; until then a request may be refused.
  const auto deadline = std::chrono::steady_clock::now() + scaled(std::chrono::seconds(60));
  std::optional<std::vector<int32_t>> again;
  while (!again && std::chrono::steady_clock::now() < deadline) {
    again = answered_tokens(http_call(cluster.port(), "POST", "/v1/completions", completion_body(p),
                                      std::chrono::seconds(30)));
    if (!again) std::this_thread::sleep_for(std::chrono::milliseconds(50)); // polling pace
  }
  ASSERT_TRUE(again) << "the restarted decode instance never served";
  EXPECT_EQ(*again, reference_tokens(p));
}
