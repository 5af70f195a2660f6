// The blocking HTTP request against the fake OpenAI server: the answer whole, a refused
// connection as an error instead of an exception, and http_get_ok naming what failed.

#include "services/loadgen/http_client.hpp"
#include "tests/services/loadgen/fake_openai_server.hpp"

// clang-format off
#include <utility> // before asio: Boost 1.74's awaitable.hpp uses std::exchange
// clang-format on
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace lg = supernode::services::loadgen;
using supernode::tests::loadgen::fake_openai_server;
using supernode::tests::loadgen::fake_server_options;

TEST(http_request, a_get_reads_the_whole_answer) {
  fake_server_options fo;
  fo.model_id = "fake-model";
  fake_openai_server server(fo);
  const auto r = lg::http_request(lg::parse_http_url(server.url()), "GET", "/v1/models");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(nlohmann::json::parse(r.body)["data"][0]["id"], "fake-model");
}

TEST(http_request, a_refused_connection_is_an_error_not_an_exception) {
  uint16_t port = 0;
  {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor a(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  const auto url = lg::parse_http_url("http://127.0.0.1:" + std::to_string(port));
  const auto r = lg::http_request(url, "GET", "/metrics");
  EXPECT_EQ(r.status, 0u);
  EXPECT_EQ(r.error, "Connection refused");
  try {
    lg::http_get_ok(url, "/metrics", 5);
    FAIL() << "http_get_ok did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "GET http://127.0.0.1:" + std::to_string(port) + "/metrics: Connection refused");
  }
}

TEST(http_request, http_get_ok_throws_on_a_status_other_than_200) {
  fake_openai_server server({});
  const auto url = lg::parse_http_url(server.url());
  EXPECT_EQ(lg::http_request(url, "GET", "/v1/completions").status, 400u);
  EXPECT_THROW(lg::http_get_ok(url, "/v1/completions", 5), std::runtime_error);
}
