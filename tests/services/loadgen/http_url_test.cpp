#include "services/loadgen/http_url.hpp"

#include <gtest/gtest.h>
#include <stdexcept>

namespace lg = supernode::services::loadgen;

TEST(loadgen_http_url, parses_host_port_and_base_path) {
  const auto a = lg::parse_http_url("http://127.0.0.1:8000");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, "8000");
  EXPECT_EQ(a.target("/v1/completions"), "/v1/completions");
  EXPECT_EQ(a.host_header(), "127.0.0.1:8000");

  const auto b = lg::parse_http_url("http://gateway/prefix/");
  EXPECT_EQ(b.port, "80");
  EXPECT_EQ(b.target("/v1/models"), "/prefix/v1/models");
  EXPECT_EQ(b.host_header(), "gateway");

  const auto c = lg::parse_http_url("localhost:9000");
  EXPECT_EQ(c.host, "localhost");
  EXPECT_EQ(c.port, "9000");

  const auto d = lg::parse_http_url("http://[::1]:8000/");
  EXPECT_EQ(d.host, "::1");
  EXPECT_EQ(d.host_header(), "[::1]:8000");
}

TEST(loadgen_http_url, rejects_what_it_cannot_talk_to) {
  for (const char* bad :
       {"https://x:443", "http://:80", "http://x:port", "http://x:70000", "", "http://[::1"})
    EXPECT_THROW(lg::parse_http_url(bad), std::invalid_argument) << bad;
}
