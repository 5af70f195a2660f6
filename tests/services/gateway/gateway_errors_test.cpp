// Error codes travel from the role that fails to the HTTP answer: the gateway and the scheduler
// run over the inproc plane (no processes, no actors), a probe stands in for the decode
// instance, and every refusal reaches the client with the status the gateway's one table gives
// its code and the code's name in the OpenAI error body.

#include "../../model/tiny_model.hpp"
#include "../../support/http_client.hpp"
#include "../../support/probe_endpoint.hpp"
#include "../../support/role_host.hpp"
#include "../../transport/inbox.hpp"
#include "services/gateway/error_mapping.hpp"
#include "services/gateway/gateway_service.hpp"
#include "services/scheduler/scheduler_service.hpp"
#include "services/serving/cluster_file.hpp"

#include <filesystem>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace supernode;
using namespace supernode::services;
using namespace std::chrono_literals;
using protocol::serving_errc;
using supernode::testing::http_call;
using supernode::testing::http_reply;
using supernode::testing::inbox;
using supernode::testing::role_host;

namespace {

std::string config_text() {
  const std::string name = "gw-errors-" + std::to_string(::getpid());
  return "[cluster]\nname = \"" + name + "\"\nrun_dir = \"/tmp/" + name +
         "\"\nheartbeat_ms = 50\nmissed_heartbeats = 6\n"
         "[planes.local]\nkind = \"inproc\"\n[flows]\ndefault = \"local\"\n"
         "[process.all]\nroles = [\"gateway\", \"scheduler\", \"decode\"]\n"
         "[model]\npath = \"" +
         supernode::testing::tiny_model_dir().string() +
         "\"\nmax_context = 1024\n[kv]\nblock_size = 16\n[gateway]\nport = 0\n"
         "[scheduler]\nmax_queued = 1\n";
}

std::string completion(int prompt_tokens, int max_tokens) {
  nlohmann::json j = {{"model", "tiny"}, {"max_tokens", max_tokens}};
  std::vector<int32_t> ids(prompt_tokens);
  for (int i = 0; i < prompt_tokens; ++i) ids[i] = 100 + i;
  j["prompt"] = ids;
  return j.dump();
}

// The error's status, OpenAI type, code name and number, as the client sees them.
void expect_error(const http_reply& r, unsigned status, const char* type, serving_errc code) {
  EXPECT_EQ(r.status, status) << r.body;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
  const auto want = protocol::error(code, "");
  EXPECT_EQ(j["error"]["type"], type) << r.body;
  EXPECT_EQ(j["error"]["code"], want.name()) << r.body;
  EXPECT_EQ(j["error"]["supernode_code"], static_cast<int>(code)) << r.body;
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty()) << r.body;
}

struct cluster {
  cluster_file file = cluster_file::parse(config_text(), "test.toml");
  transport::cluster_config& config = file.cluster;
  serving_config& serving = file.serving;
  role_host<scheduler_service> scheduler{config, "scheduler-0",
                                         std::make_shared<scheduler_service>(serving, config)};
  role_host<gateway_service> gateway{config, "gateway-0",
                                     std::make_shared<gateway_service>(serving)};
  inbox decode_mail;
  supernode::testing::probe_endpoint decode{
      config, "decode-0", [this](transport::endpoint& e) { decode_mail.attach(e); }};

  uint16_t port() { return gateway.service().http_port(); }
  std::future<http_reply> post_async(const std::string& body) {
    return std::async(std::launch::async, [port = port(), body] {
      return http_call(port, "POST", "/v1/completions", body);
    });
  }
  // The decode instance's view: a pool of `blocks` KV blocks, none released yet.
  void report_capacity(int64_t blocks) {
    protocol::load_report r;
    r.role = "decode";
    r.kv_blocks_total = blocks;
    ASSERT_EQ(decode.ep.send("control", "scheduler-0", transport::make_envelope(r)),
              transport::send_status::ok);
  }
  size_t queued() {
    return scheduler.locked([](scheduler_service& s) { return s.queued(); });
  }
};

} // namespace

TEST(gateway_errors, every_refusal_reaches_the_client_with_its_code) {
  cluster c;
  c.report_capacity(4); // 64 tokens of KV
  // The gateway refuses what the model's context cannot hold, before the cluster sees it.
  expect_error(http_call(c.port(), "POST", "/v1/completions", completion(1000, 100)), 400,
               "invalid_request_error", serving_errc::context_length_exceeded);

  // A: 30 + 34 tokens take all four blocks; the decode probe accepts it and never finishes it.
  auto a = c.post_async(completion(30, 34));
  ASSERT_TRUE(
      c.decode_mail.wait_for([&] { return c.decode_mail.count<protocol::decode_assign>() > 0; }));
  protocol::decode_assign_result accepted;
  {
    std::lock_guard lock(c.decode_mail.m);
    accepted.key = c.decode_mail.messages.back().second.get<protocol::decode_assign>()->key;
  }
  c.decode.ep.send("control", "scheduler-0", transport::make_envelope(accepted));

  // More KV than any decode instance holds: the scheduler's code, a client error.
  expect_error(http_call(c.port(), "POST", "/v1/completions", completion(100, 2)), 400,
               "invalid_request_error", serving_errc::kv_capacity_exceeded);

  // B waits for KV (the queue holds one); C finds the queue full.
  auto b = c.post_async(completion(10, 10));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (c.queued() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(c.queued(), 1u);
  expect_error(http_call(c.port(), "POST", "/v1/completions", completion(10, 10)), 429,
               "rate_limit_error", serving_errc::queue_full);

  // The decode instance leaves: the placed request ends with instance_down, the queued one and
  // every later one with no_decode_instance, all retryable elsewhere (503).
  c.decode.ep.announce_leave("test over");
  expect_error(a.get(), 503, "service_unavailable", serving_errc::instance_down);
  expect_error(b.get(), 503, "service_unavailable", serving_errc::no_decode_instance);
  expect_error(http_call(c.port(), "POST", "/v1/completions", completion(10, 10)), 503,
               "service_unavailable", serving_errc::no_decode_instance);
}

TEST(gateway_errors, the_table_maps_every_code_and_says_what_is_retryable) {
  for (const auto& info : protocol::all_error_codes()) {
    const auto m = gateway::http_mapping_of(info.code);
    EXPECT_GE(m.status, 400u) << info.name;
    // A code another instance could serve is never the client's fault (4xx but 429).
    if (info.retry_elsewhere) {
      EXPECT_TRUE(m.status >= 500 || m.status == 429) << info.name;
    }
    EXPECT_EQ(protocol::describe_error(info.code).name, std::string(info.name));
  }
  EXPECT_EQ(gateway::http_mapping_of(static_cast<uint16_t>(serving_errc::queue_full)).status, 429u);
  EXPECT_EQ(protocol::describe_error(9999).name, std::string("unknown"));
}

TEST(gateway_errors, docs_list_every_code_as_the_table_renders_it) {
  std::ifstream in(std::filesystem::path(SUPERNODE_SOURCE_DIR) / "docs" / "errors.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::string begin = "<!-- BEGIN error table -->\n", end = "<!-- END error table -->";
  const auto from = doc.find(begin), to = doc.find(end);
  ASSERT_TRUE(from != std::string::npos && to != std::string::npos)
      << "docs/errors.md lacks markers";
  EXPECT_EQ(doc.substr(from + begin.size(), to - from - begin.size()),
            gateway::error_table_markdown())
      << "docs/errors.md is stale: paste error_table_markdown()'s output between the markers";
}
