// Compose clusters on a real engine: pdc-ems with host networking (its compose file made by
// the generator, as the committed one is, from the config with a gateway port of the test's
// own: the host's port 8000 may be another cluster's) and pdc-2p2d on a bridge network (the
// committed file) become healthy and serve the reference engine's greedy tokens (6 prompts one
// at a time, 32 at once); under a 100-request load a killed decode container is restarted by
// the engine with nothing lost, and decode scaled to 3 joined instances and back to 1 loses
// nothing; each leaves no container, volume or network behind. The chaos profile of pdc-2p2d
// kills a decode under its load with nothing lost, and its JSON report reads back; pdc-2p2d
// deployed as a swarm stack serves the reference tokens and leaves nothing behind either.
// Skipped only when no docker engine can be started here.

#include "../apps/serving_fixture.hpp"
#include "../support/eventually.hpp"
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
#include <nlohmann/json.hpp>
#include <sstream>
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

// configs/<shape>.toml with a free gateway port, and its compose file for `network` (of the
// test's image) beside it, in a folder of the test's own; returns the compose file.
std::string shape_on_a_port_of_its_own(const std::string& shape, const std::filesystem::path& dir,
                                       int port, const std::string& network = "host") {
  namespace compose = supernode::services::compose;
  std::filesystem::create_directories(dir);
  const auto config = dir / (shape + ".toml");
  supernode::services::cluster::cluster_file::read(std::string(SUPERNODE_SOURCE_DIR) + "/configs/" +
                                                   shape + ".toml")
      .set("gateway", "port", std::to_string(port))
      // The liveness bound the process tests use: eight containers starting at once on two
      // cores kept a healthy process's heartbeats away for more than the default half second,
      // and the peer that judged it fenced it (a restart, and a healthcheck out of retries).
      .set("cluster", "missed_heartbeats", supernode::testing::test_missed_heartbeats)
      .write(config);
  compose::compose_request request;
  request.config = config;
  request.network = network;
  request.image = test_image();
  request.models = models_dir();
  request.out = dir / (shape + "." + network + ".yml");
  const auto made = compose::make_compose(request);
  std::ofstream(*request.out) << made.yaml;
  if (!made.bridge_config.empty()) std::ofstream(made.bridge_config) << made.bridge_config_text;
  return request.out->string();
}

std::filesystem::path test_dir(const std::string& name) {
  return std::filesystem::path(SUPERNODE_BINARY_DIR) / "docker-test" /
         (name + "-" + std::to_string(getpid()));
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
  const auto dir = test_dir("ems");
  const int port = supernode::transport::free_tcp_port_range(1, 8000);
  compose_cluster cluster("sntest-ems-" + std::to_string(getpid()),
                          shape_on_a_port_of_its_own("pdc-ems", dir, port), models_dir());
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

TEST_F(compose_test, chaos_profile_kills_a_decode_under_load_and_loses_nothing) {
  const auto dir = test_dir("chaos");
  const int port = supernode::transport::free_tcp_port_range(1, 8000);
  compose_cluster cluster("sntest-chaos-" + std::to_string(getpid()),
                          shape_on_a_port_of_its_own("pdc-2p2d", dir, port), models_dir());
  // The compose file mounts the plans beside its config (faults/) into the chaos service.
  std::filesystem::create_directories(dir / "faults");
  std::ofstream(dir / "faults" / "kill-decode-soon.toml") << "[[fault]]\n"
                                                             "at_s = 1.0\n"
                                                             "kind = \"kill\"\n"
                                                             "target = \"decode-1\"\n";
  ASSERT_EQ(cluster.up(), "");
  ASSERT_TRUE(cluster.healthy(start_timeout)) << cluster.logs();
  std::string out;
  const int status = cluster.compose("run --rm -T chaos --faults "
                                     "/srv/supernode/faults/kill-decode-soon.toml "
                                     "--num-prompts 120 --concurrency 8 --max-tokens 16",
                                     &out);
  // The report, where the compose file's default bind mount puts it.
  std::ifstream report_file(dir / "chaos-reports" / "chaos-report.json");
  ASSERT_TRUE(report_file.good()) << "exit " << status << ", no report\n" << out << cluster.logs();
  const auto report = nlohmann::json::parse(report_file);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(report.at("requests"), 120);
  EXPECT_EQ(report.at("succeeded"), 120) << report.dump(2);
  EXPECT_EQ(report.at("failed"), 0);
  EXPECT_EQ(report.at("mismatched"), 0);
  EXPECT_EQ(report.at("duplicated_tokens"), 0);
  ASSERT_EQ(report.at("faults").size(), 1u);
  const auto& fault = report.at("faults")[0];
  EXPECT_EQ(fault.at("kind"), "kill");
  EXPECT_FALSE(fault.contains("note")) << fault.dump(); // a note says why it did not fire
  // The load goes on for seconds after the kill: the gateway sees decode-1 go and come back.
  EXPECT_TRUE(fault.at("detected_s").is_number()) << fault.dump();
  EXPECT_TRUE(fault.at("recovered_s").is_number()) << fault.dump();
  std::printf("[ info ] chaos profile: decode-1 killed at %.1f s, %d of 120 succeeded, "
              "detected %s s, recovered %s s\n",
              fault.at("at_s").get<double>(), report.at("succeeded").get<int>(),
              fault.at("detected_s").dump().c_str(), fault.at("recovered_s").dump().c_str());
  EXPECT_EQ(cluster.down(), "") << "left behind";
  std::filesystem::remove_all(dir);
}

// Takes part in a single-node swarm for the test's length: makes one on loopback when the
// engine is in none, and leaves it at the end only then.
class single_node_swarm {
public:
  single_node_swarm() {
    std::string state;
    shell("docker info -f '{{.Swarm.LocalNodeState}}'", &state);
    if (state.rfind("active", 0) == 0) return;
    std::string out;
    if (shell("docker swarm init --advertise-addr 127.0.0.1 2>&1", &out) != 0)
      error_ = "docker swarm init: " + out;
    else
      created_ = true;
  }
  ~single_node_swarm() {
    if (!created_) return;
    shell("docker swarm leave --force >/dev/null 2>&1");
    // swarm init made it; leaving keeps it
    shell("docker network rm docker_gwbridge >/dev/null 2>&1");
  }
  single_node_swarm(const single_node_swarm&) = delete;
  single_node_swarm& operator=(const single_node_swarm&) = delete;
  const std::string& error() const { return error_; }

private:
  bool created_ = false;
  std::string error_;
};

// What of a stack is still there: its services, containers, networks and volumes.
std::string stack_leftovers(const std::string& stack) {
  std::string left;
  for (const char* kind : {"service ls", "ps -a", "network ls", "volume ls"}) {
    std::string out;
    shell(std::string("docker ") + kind + " -q --filter label=com.docker.stack.namespace=" + stack +
              " 2>/dev/null",
          &out);
    if (!out.empty()) left += std::string(kind) + ": " + out;
  }
  return left;
}

TEST_F(compose_test, swarm_stack_of_pdc_2p2d_serves_the_reference_tokens_and_leaves_nothing) {
  const single_node_swarm swarm;
  ASSERT_EQ(swarm.error(), "");
  const auto dir = test_dir("swarm");
  // The committed pdc-2p2d.swarm.yml as the generator makes it, of the test's image (port 8000
  // is the gateway container's own loopback's, so no other cluster collides with it).
  const auto file = shape_on_a_port_of_its_own("pdc-2p2d", dir, 8000, "swarm");
  const std::string stack = "sntest-swarm-" + std::to_string(getpid());
  const std::string env = "SUPERNODE_MODELS='" + models_dir() + "' ";
  std::string out;
  ASSERT_EQ(shell(env + "docker stack deploy -c '" + file + "' " + stack + " 2>&1", &out), 0)
      << out;
  const auto removed = [&] {
    shell("docker stack rm " + stack + " >/dev/null 2>&1");
    // The stack's volumes outlive it; they go once its containers have.
    eventually(
        [&] {
          std::string containers;
          shell("docker ps -aq --filter label=com.docker.stack.namespace=" + stack, &containers);
          return containers.empty();
        },
        std::chrono::seconds(120), std::chrono::milliseconds(500));
    shell("docker volume ls -q --filter label=com.docker.stack.namespace=" + stack +
          " | xargs -r docker volume rm >/dev/null 2>&1");
    return eventually([&] { return stack_leftovers(stack).empty(); }, std::chrono::seconds(60),
                      std::chrono::milliseconds(500));
  };
  // Every slot's task running and healthy (run-dir's has done its work and exited).
  const bool healthy = eventually(
      [&] {
        std::string replicas, states;
        shell("docker stack services " + stack + " --format '{{.Name}} {{.Replicas}}'", &replicas);
        std::istringstream lines(replicas);
        int slots = 0;
        for (std::string name, count; lines >> name >> count;) {
          if (name == stack + "_run-dir" || count == "0/0") continue;
          if (count != "1/1") return false;
          ++slots;
        }
        shell("docker ps -q --filter label=com.docker.stack.namespace=" + stack +
                  " | xargs -r docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}"
                  "{{end}}'",
              &states);
        return slots == 5 /* gateway-0, prefill-0 and -1, decode-0 and -1 */ &&
               states.find("starting") == std::string::npos &&
               states.find("unhealthy") == std::string::npos;
      },
      start_timeout, std::chrono::milliseconds(1000));
  if (!healthy) {
    shell("docker stack ps --no-trunc " + stack + " 2>&1", &out);
    ADD_FAILURE() << "the stack did not become healthy\n" << out;
  } else {
    std::string gateway;
    shell("docker ps -q --filter label=com.docker.swarm.service.name=" + stack + "_gateway-0",
          &gateway);
    gateway = gateway.substr(0, gateway.find('\n'));
    ASSERT_FALSE(gateway.empty());
    std::string pid;
    shell("docker inspect -f '{{.State.Pid}}' " + gateway, &pid);
    // The gateway listens on its container's loopback, as on a bridge network.
    in_network_of(std::atoi(pid.c_str()), [] { expect_reference_tokens(8000); });
  }
  EXPECT_TRUE(removed()) << "left behind: " << stack_leftovers(stack);
  std::filesystem::remove_all(dir);
}

} // namespace
