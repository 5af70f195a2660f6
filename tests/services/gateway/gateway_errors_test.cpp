// Error codes travel from the role that fails to the HTTP answer: the gateway and the scheduler
// run over the inproc plane (no processes, no actors), a probe stands in for the decode
// instance, and every refusal reaches the client with the status the gateway's one table gives
// its code and the code's name in the OpenAI error body. Errors that come from the cluster name
// the code and the gateway, never the addresses or files in their messages. API keys: 401 without
// a valid one, 429 with Retry-After over a key's limits, and the loopback rule without keys.

#include "../../model/tiny_model.hpp"
#include "../../support/eventually.hpp"
#include "../../support/http_client.hpp"
#include "../../support/probe_endpoint.hpp"
#include "../../support/role_host.hpp"
#include "../../transport/inbox.hpp"
#include "services/beast.hpp"
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

// `gateway_keys`: more lines of the [gateway] table.
std::string config_text(const std::string& gateway_keys = "") {
  const std::string name = "gw-errors-" + std::to_string(::getpid());
  return "[cluster]\nname = \"" + name + "\"\nrun_dir = \"/tmp/" + name +
         "\"\nheartbeat_ms = 50\nmissed_heartbeats = 6\n"
         "[planes.local]\nkind = \"inproc\"\n[flows]\ndefault = \"local\"\n"
         "[process.all]\nroles = [\"gateway\", \"scheduler\", \"decode\"]\n"
         "[model]\npath = \"" +
         supernode::testing::tiny_model_dir().string() +
         "\"\nmax_context = 1024\n[kv]\nblock_size = 16\n[gateway]\nport = 0\n"
         // Every failure goes to the client as it comes: resuming is request_tracker_test's.
         "recovery_timeout_ms = 0\n" +
         gateway_keys + "[scheduler]\nmax_queued = 1\n";
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
  const auto message = j["error"]["message"].get<std::string>();
  EXPECT_FALSE(message.empty()) << r.body;
  for (const char* internal : {"ipc://", "tcp://", "/tmp/"})
    EXPECT_EQ(message.find(internal), std::string::npos) << r.body;
}

// An answer with its headers, for requests that carry an API key.
struct keyed_reply {
  unsigned status = 0;
  std::string retry_after, www_authenticate, body;
  http_reply reply() const { return {status, "", body, ""}; }
};

keyed_reply keyed_call(uint16_t port, const std::string& method, const std::string& target,
                       const std::string& key, const std::string& body = "") {
  namespace net = boost::asio;
  namespace http = boost::beast::http;
  net::io_context io;
  net::ip::tcp::socket socket(io);
  socket.connect({net::ip::make_address("127.0.0.1"), port});
  timeval patience{60, 0}; // a bound on every read: a server bug fails the test, not hangs it
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "test");
  if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(socket, req);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(socket, buffer, res);
  return {res.result_int(), std::string(res[http::field::retry_after]),
          std::string(res[http::field::www_authenticate]), res.body()};
}

std::filesystem::path write_keys_file(const std::string& text) {
  auto path =
      std::filesystem::temp_directory_path() / ("gw-keys-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << text;
  std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::owner_write);
  return path;
}

struct cluster {
  explicit cluster(const std::string& gateway_keys = "") : gateway_keys(gateway_keys) {}
  std::string gateway_keys;
  cluster_file file = cluster_file::parse(config_text(gateway_keys), "test.toml");
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
  ASSERT_TRUE(supernode::testing::eventually([&] { return c.queued() != 0; }));
  ASSERT_EQ(c.queued(), 1u);
  expect_error(http_call(c.port(), "POST", "/v1/completions", completion(10, 10)), 429,
               "rate_limit_error", serving_errc::queue_full);

  // The decode instance leaves: the placed request ends with instance_down, the queued one and
  // every later one with no_decode_instance, all retryable elsewhere (503).
  // Its reason names an address: the client sees the code and the gateway, the log the rest.
  c.decode.ep.announce_leave("left ipc:///tmp/gw-errors/decode-0.sock");
  const auto lost = a.get();
  expect_error(lost, 503, "service_unavailable", serving_errc::instance_down);
  EXPECT_NE(lost.body.find("gateway-0"), std::string::npos) << lost.body;
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

TEST(gateway_errors, messages_from_the_cluster_lose_addresses_and_paths_but_keep_names) {
  using gateway::without_internals;
  EXPECT_EQ(without_internals("decode-0 went down (left ipc:///tmp/run/decode-0.sock)"),
            "decode-0 went down (left <internal>)");
  EXPECT_EQ(without_internals("cannot open /var/lib/models/x.safetensors: no such file"),
            "cannot open <internal>: no such file");
  EXPECT_EQ(without_internals("peer at tcp://10.0.0.7:5555 and 10.0.0.8:6000, ./relative"),
            "peer at <internal> and <internal>, <internal>");
  EXPECT_EQ(without_internals("rank 2 of decode-2 is silent: 30000 ms"),
            "rank 2 of decode-2 is silent: 30000 ms");
  const auto e = gateway::to_client_api_error(
      {serving_errc::instance_down, "prefill-1 went down (heartbeat: ipc:///tmp/x)"}, "gateway-3");
  EXPECT_EQ(std::string(e.what()),
            "prefill-1 went down (heartbeat: <internal>) (instance_down 2009, answered by "
            "gateway-3)");
  EXPECT_EQ(e.status, 503u);
  EXPECT_EQ(e.code, "instance_down");
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

namespace {
constexpr const char* open_key = "sk-open-0123456789abcdef";
constexpr const char* solo_key = "sk-solo-0123456789abcdef";
constexpr const char* metered_key = "sk-meter-0123456789abcdef";

// Waits (bounded) until the gateway holds `n` requests.
bool wait_in_flight(cluster& c, size_t n) {
  return supernode::testing::eventually([&] { return c.gateway.service().live_requests() == n; });
}

void expect_rate_limited(const keyed_reply& r, serving_errc code, int64_t max_wait) {
  EXPECT_EQ(r.status, 429u) << r.body;
  const auto j = nlohmann::json::parse(r.body);
  EXPECT_EQ(j["error"]["type"], "rate_limit_error");
  EXPECT_EQ(j["error"]["code"], protocol::error(code, "").name());
  ASSERT_FALSE(r.retry_after.empty());
  const int64_t seconds = std::stoll(r.retry_after); // whole seconds
  EXPECT_GE(seconds, 1);
  EXPECT_LE(seconds, max_wait);
}
} // namespace

TEST(gateway_keys, v1_needs_a_known_key_and_each_key_keeps_its_limits) {
  const auto keys = write_keys_file(std::string("# test keys\n") + open_key + " name=open\n" +
                                    solo_key + " name=solo max_concurrent=1\n" + metered_key +
                                    " name=metered tokens_per_minute=20\n");
  std::future<keyed_reply> held_solo, held_metered; // before the cluster: they end with it
  cluster c("api_keys_file = \"" + keys.string() + "\"\n");
  c.report_capacity(64);

  const auto missing = keyed_call(c.port(), "GET", "/v1/models", "");
  expect_error(missing.reply(), 401, "authentication_error", serving_errc::invalid_api_key);
  EXPECT_EQ(missing.www_authenticate, "Bearer");
  const auto wrong = keyed_call(c.port(), "GET", "/v1/models", "sk-open-0123456789abcdeX");
  expect_error(wrong.reply(), 401, "authentication_error", serving_errc::invalid_api_key);
  const auto no_key_completion =
      keyed_call(c.port(), "POST", "/v1/completions", "", completion(5, 2));
  EXPECT_EQ(no_key_completion.status, 401u) << no_key_completion.body;
  EXPECT_EQ(keyed_call(c.port(), "GET", "/v1/models", open_key).status, 200u);
  // /health and /metrics stay open.
  EXPECT_NE(keyed_call(c.port(), "GET", "/health", "").status, 401u);
  EXPECT_EQ(keyed_call(c.port(), "GET", "/metrics", "").status, 200u);

  // solo: one request in flight (the decode probe never finishes it); the next is refused.
  held_solo = std::async(std::launch::async, [port = c.port()] {
    return keyed_call(port, "POST", "/v1/completions", solo_key, completion(10, 6));
  });
  ASSERT_TRUE(wait_in_flight(c, 1));
  expect_rate_limited(keyed_call(c.port(), "POST", "/v1/completions", solo_key, completion(5, 2)),
                      serving_errc::key_concurrency_limit, 1);
  // Another key is not held back by solo's limit.
  // metered: its first prompt (30 tokens) is admitted below the limit and fills the window.
  held_metered = std::async(std::launch::async, [port = c.port()] {
    return keyed_call(port, "POST", "/v1/completions", metered_key, completion(30, 2));
  });
  ASSERT_TRUE(wait_in_flight(c, 2));
  expect_rate_limited(
      keyed_call(c.port(), "POST", "/v1/completions", metered_key, completion(5, 2)),
      serving_errc::key_token_rate_limit, 60);

  const auto metrics = keyed_call(c.port(), "GET", "/metrics", "").body;
  EXPECT_NE(metrics.find(R"(supernode_api_key_requests_total{key="solo",status="429"} 1)"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(supernode_api_key_requests_total{key="open",status="200"} 1)"),
            std::string::npos)
      << metrics;
  for (const char* key : {open_key, solo_key, metered_key})
    EXPECT_EQ(metrics.find(key), std::string::npos) << "a key's text is in /metrics";
  std::filesystem::remove(keys);
}

TEST(gateway_keys, without_keys_only_loopback_hosts_unless_allowed) {
  EXPECT_TRUE(gateway::is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(gateway::is_loopback_host("127.3.2.1"));
  EXPECT_TRUE(gateway::is_loopback_host("::1"));
  EXPECT_TRUE(gateway::is_loopback_host("localhost"));
  EXPECT_FALSE(gateway::is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(gateway::is_loopback_host("10.0.0.1"));
  EXPECT_FALSE(gateway::is_loopback_host("example.com"));

  auto file = cluster_file::parse(config_text("host = \"0.0.0.0\"\n"), "test.toml");
  transport::endpoint ep(file.cluster, "gateway-0", transport::make_plane, 1);
  gateway_service refused(file.serving);
  try {
    refused.start(ep);
    ADD_FAILURE() << "listened on 0.0.0.0 without keys";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("0.0.0.0"), std::string::npos) << what;
    EXPECT_NE(what.find("--allow-unauthenticated"), std::string::npos) << what;
    EXPECT_NE(what.find("allow_unauthenticated = true"), std::string::npos) << what;
    EXPECT_NE(what.find("api_keys_file"), std::string::npos) << what;
  }
  file.serving.allow_unauthenticated = true; // what `serve --allow-unauthenticated` sets
  gateway_service allowed(file.serving);
  allowed.start(ep);
  EXPECT_NE(allowed.http_port(), 0);
  allowed.stop();
}
