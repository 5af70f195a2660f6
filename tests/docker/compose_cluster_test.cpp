// Compose clusters on a real engine: pdc-ems with host networking (its compose file made by
// the generator, as the committed one is, from the config with a gateway port of the test's
// own: the host's port 8000 may be another cluster's) and pdc-2p2d on a bridge network (the
// committed file) become healthy and serve the reference engine's greedy tokens (6 prompts one
// at a time, 32 at once); under a 100-request load a killed decode container is restarted by
// the engine with nothing lost, and decode scaled to 3 joined instances and back to 1 loses
// nothing; each leaves no container, volume or network behind. Skipped only when no docker
// engine can be started here.

#include "../apps/serving_fixture.hpp"
#include "compose_cluster.hpp"
#include "model/tokenizer.hpp"
#include "services/cluster/cluster_file.hpp"
#include "services/compose/compose_project.hpp"
#include "transport/free_ports.hpp"

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <gtest/gtest.h>
#include <mutex>
#include <thread>

using namespace supernode::testing;

namespace {

constexpr auto start_timeout = std::chrono::seconds(600);

std::string models_dir() {
  return std::string(SUPERNODE_BINARY_DIR) + "/test-models";
}

std::filesystem::path demo_dir() {
  return std::filesystem::path(models_dir()) / "demo";
}

std::vector<served_prompt> demo_prompts() {
  auto tok = supernode::model::tokenizer::load(demo_dir());
  std::vector<served_prompt> out;
  for (const char* text : {"Once upon a time", "And God said, Let there be", "The LORD is my",
                           "床前明月光，", "学而时习之，", "天下"})
    out.push_back({tok.encode(text, true), 12});
  return out;
}

// Why a request's answer is not the reference's, or "".
std::string wrong_answer(const http_reply& reply, const served_prompt& prompt) {
  const auto got = answered_tokens(reply);
  if (!got) return std::to_string(reply.status) + " " + reply.body + reply.error;
  if (*got != reference_tokens(prompt, demo_dir())) return "tokens differ from the reference";
  return "";
}

void expect_reference_tokens(uint16_t port) {
  const auto prompts = demo_prompts();
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto r = http_call(port, "POST", "/v1/completions", completion_body(prompts[i], i % 2, "demo"));
    EXPECT_EQ(wrong_answer(r, prompts[i]), "") << "prompt " << i;
  }
  std::vector<http_reply> replies(32);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < replies.size(); ++i)
    clients.emplace_back([&, i] {
      replies[i] = http_call(port, "POST", "/v1/completions",
                             completion_body(prompts[i % prompts.size()], i % 3 == 0, "demo"));
    });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < replies.size(); ++i)
    EXPECT_EQ(wrong_answer(replies[i], prompts[i % prompts.size()]), "") << "request " << i;
}

// `total` requests, `concurrency` at a time, on threads of their own; `while_running` runs once
// `start_after` have been answered, with the load still going. Returns what went wrong.
std::vector<std::string> under_load(uint16_t port, int total, int concurrency, int start_after,
                                    const std::function<void()>& while_running) {
  const auto prompts = demo_prompts();
  std::atomic<int> next{0};
  std::mutex mutex;
  std::condition_variable answered_cv;
  int answered = 0;
  std::vector<std::string> wrong;
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c)
    clients.emplace_back([&] {
      for (int i; (i = next++) < total;) {
        const auto& p = prompts[i % prompts.size()];
        auto why = wrong_answer(
            http_call(port, "POST", "/v1/completions", completion_body(p, true, "demo")), p);
        std::lock_guard lock(mutex);
        if (!why.empty()) wrong.push_back("request " + std::to_string(i) + ": " + why);
        ++answered;
        answered_cv.notify_all();
      }
    });
  {
    std::unique_lock lock(mutex);
    answered_cv.wait(lock, [&] { return answered >= start_after; });
  }
  while_running();
  for (auto& t : clients) t.join();
  return wrong;
}

// configs/pdc-ems.toml with a free gateway port, and its host-networking compose file beside
// it, in a folder of the test's own; returns the compose file.
std::string pdc_ems_on_a_port_of_its_own(const std::filesystem::path& dir, int port) {
  namespace compose = supernode::services::compose;
  std::filesystem::create_directories(dir);
  const auto config = dir / "pdc-ems.toml";
  supernode::services::cluster::cluster_file::read(std::string(SUPERNODE_SOURCE_DIR) +
                                                   "/configs/pdc-ems.toml")
      .set("gateway", "port", std::to_string(port))
      .write(config);
  compose::compose_request request;
  request.config = config;
  request.models = models_dir();
  request.out = dir / "pdc-ems.host.yml";
  std::ofstream(*request.out) << compose::make_compose(request).yaml;
  return request.out->string();
}

class compose_test : public ::testing::Test {
protected:
  void SetUp() override {
    if (auto why = docker_unavailable(); !why.empty())
      GTEST_SKIP() << "no docker engine could be started here: " << why;
    ASSERT_EQ(build_image(), "");
    ASSERT_TRUE(std::filesystem::exists(demo_dir() / "config.json"))
        << "the demo model is made by the make_demo_model test";
  }
};

TEST_F(compose_test, pdc_ems_host_networking_serves_survives_a_killed_decode_and_scales) {
  const auto dir = std::filesystem::path(SUPERNODE_BINARY_DIR) / "docker-test" /
                   ("ems-" + std::to_string(getpid()));
  const int port = supernode::transport::free_tcp_port_range(1, 8000);
  compose_cluster cluster("sntest-ems-" + std::to_string(getpid()),
                          pdc_ems_on_a_port_of_its_own(dir, port), models_dir());
  ASSERT_EQ(cluster.up(), "");
  ASSERT_TRUE(cluster.healthy(start_timeout)) << cluster.logs();
  {
    SCOPED_TRACE("reference tokens");
    expect_reference_tokens(port);
  }
  {
    SCOPED_TRACE("a decode container killed under load");
    const auto decode = cluster.containers("decode-1");
    ASSERT_EQ(decode.size(), 1u);
    const int before = cluster.restarts(decode[0]);
    // SIGKILL to its process, as a crash: `docker kill` would count as a manual stop, which
    // restart policies leave stopped.
    const auto wrong = under_load(
        port, 100, 8, 10, [&] { ASSERT_EQ(::kill(cluster.main_pid(decode[0]), SIGKILL), 0); });
    EXPECT_TRUE(wrong.empty()) << wrong.size() << " lost, first: " << wrong.front();
    ASSERT_TRUE(cluster.healthy(start_timeout)) << cluster.logs();
    EXPECT_GT(cluster.restarts(decode[0]), before) << "the engine restarted it";
    std::printf("[ info ] decode-1 killed under load: %d restart(s), %zu of 100 lost\n",
                cluster.restarts(decode[0]) - before, wrong.size());
  }
  {
    SCOPED_TRACE("decode scaled to 3 joined instances and back to 1 under load");
    const auto wrong = under_load(port, 100, 8, 5, [&] {
      ASSERT_EQ(cluster.up("--no-recreate --scale decode=3"), "");
      ASSERT_TRUE(cluster.healthy(start_timeout)) << cluster.logs();
      EXPECT_EQ(cluster.containers("decode").size(), 3u);
      std::printf("[ info ] decode scaled to 3 joined instances, all healthy\n");
      ASSERT_EQ(cluster.up("--no-recreate --scale decode=1"), "");
      EXPECT_EQ(cluster.containers("decode").size(), 1u);
    });
    EXPECT_TRUE(wrong.empty()) << wrong.size() << " lost, first: " << wrong.front();
  }
  EXPECT_EQ(cluster.down(), "") << "left behind";
  std::filesystem::remove_all(dir);
}

TEST_F(compose_test, pdc_2p2d_bridge_networking_serves_the_reference_tokens) {
  compose_cluster cluster("sntest-2p2d-" + std::to_string(getpid()),
                          committed_compose_file("pdc-2p2d.bridge.yml"), models_dir());
  ASSERT_EQ(cluster.up(), "");
  ASSERT_TRUE(cluster.healthy(start_timeout)) << cluster.logs();
  const auto gateway = cluster.containers("gateway-0");
  ASSERT_EQ(gateway.size(), 1u);
  // The gateway listens on its container's loopback: the client goes there.
  in_network_of(cluster.main_pid(gateway[0]), [] { expect_reference_tokens(8000); });
  EXPECT_EQ(cluster.down(), "") << "left behind";
}

} // namespace
