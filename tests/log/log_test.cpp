#include "log/log.hpp"

#include <cstdlib>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

namespace supernode::log {
namespace {

using namespace std::chrono_literals;

// Captures what is logged and puts the process-wide settings back afterwards.
class log_test : public ::testing::Test {
protected:
  void SetUp() override {
    set_level(level::info);
    set_format(format::text);
    redirect_for_testing(&out_);
  }
  void TearDown() override {
    redirect_for_testing(nullptr);
    set_level(level::info);
    set_format(format::text);
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> result;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) result.push_back(line);
    return result;
  }
  std::vector<nlohmann::json> json_lines() const {
    std::vector<nlohmann::json> result;
    for (auto& line : lines()) result.push_back(nlohmann::json::parse(line));
    return result;
  }

  std::ostringstream out_;
};

TEST_F(log_test, text_lines_name_instance_incarnation_and_request) {
  logger log{"prefill-0", 1746091052000017};
  log.warn("bad frame #{} from {}", 3, "decode-0");
  log.for_request("gateway-0/17").info("placed on {}", "decode-1");
  const auto got = lines();
  ASSERT_EQ(got.size(), 2u);
  const std::regex text(R"((\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (\w+) +instance=(\S+) )"
                        R"(incarnation=(\d+) request=(\S+) (.*))");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(got[0], m, text)) << got[0];
  EXPECT_EQ(m[2], "WARN");
  EXPECT_EQ(m[3], "prefill-0");
  EXPECT_EQ(m[4], "1746091052000017");
  EXPECT_EQ(m[5], "-");
  EXPECT_EQ(m[6], "bad frame #3 from decode-0");
  ASSERT_TRUE(std::regex_match(got[1], m, text)) << got[1];
  EXPECT_EQ(m[2], "INFO");
  EXPECT_EQ(m[5], "gateway-0/17");
  EXPECT_EQ(m[6], "placed on decode-1");
}

TEST_F(log_test, json_lines_parse_back_with_every_field) {
  set_format(format::json);
  logger log{"decode-1", 42};
  log.error("tokens for {} lost: {}", "gateway-0", "peer down");
  log.for_request("gateway-0/9").debug("not shown at info");
  log.for_request("gateway-0/9").info("quote \" backslash \\ newline \n end");
  const auto got = json_lines();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(std::regex_match(got[0]["time"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")));
  EXPECT_EQ(got[0]["level"], "error");
  EXPECT_EQ(got[0]["instance"], "decode-1");
  EXPECT_EQ(got[0]["incarnation"], 42);
  EXPECT_TRUE(got[0]["request"].is_null());
  EXPECT_EQ(got[0]["msg"], "tokens for gateway-0 lost: peer down");
  EXPECT_FALSE(got[0].contains("suppressed"));
  EXPECT_EQ(got[1]["request"], "gateway-0/9");
  EXPECT_EQ(got[1]["msg"], "quote \" backslash \\ newline \n end");
}

TEST_F(log_test, bytes_from_a_peer_cannot_break_a_line) {
  logger log{"shm-0"};
  log.warn("ignoring slot from '{}'", std::string("evil\nFAKE line\x01\xff", 16));
  set_format(format::json);
  log.warn("ignoring slot from '{}'", std::string("evil\n\xff", 6));
  const auto got = lines();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[0].find(R"(ignoring slot from 'evil\nFAKE line\x01)"), std::string::npos) << got[0];
  // Not UTF-8: replaced, and the line still parses.
  auto j = nlohmann::json::parse(got[1]);
  EXPECT_EQ(j["msg"], "ignoring slot from 'evil\n\xEF\xBF\xBD'");
}

TEST_F(log_test, the_level_filters_lines_below_it) {
  logger log{"x"};
  set_level(level::trace);
  log.trace("t");
  log.debug("d");
  set_level(level::warn);
  log.info("i");
  log.warn("w");
  log.error("e");
  set_level(level::off);
  log.error("nothing");
  const auto got = lines();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_NE(got[0].find("TRACE"), std::string::npos);
  EXPECT_NE(got[1].find("DEBUG"), std::string::npos);
  EXPECT_NE(got[2].find("WARN"), std::string::npos);
  EXPECT_NE(got[3].find("ERROR"), std::string::npos);
}

TEST_F(log_test, a_rate_limited_line_says_how_many_it_held_back) {
  rate_limiter::clock::time_point now{};
  rate_limiter limiter(1s, [&] { return now; });
  logger log{"zmq-0", 7};
  for (int i = 0; i < 313; ++i) log.limited(limiter, level::warn, "bad frame", "bad frame {}", i);
  now += 1s;
  log.limited(limiter, level::warn, "bad frame", "bad frame {}", 313);
  set_format(format::json);
  for (int i = 0; i < 3; ++i) log.limited(limiter, level::warn, "bad frame", "bad frame {}", i);
  now += 2s;
  log.limited(limiter, level::warn, "bad frame", "bad frame again");
  const auto got = lines();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_NE(got[0].find("bad frame 0"), std::string::npos);
  EXPECT_EQ(got[0].find("(x "), std::string::npos);
  EXPECT_NE(got[1].find("bad frame 313 (x 312 in the last 1.0 s)"), std::string::npos) << got[1];
  auto j = nlohmann::json::parse(got[2]);
  EXPECT_EQ(j["msg"], "bad frame again");
  EXPECT_EQ(j["suppressed"], 3);
  EXPECT_DOUBLE_EQ(j["window_s"].get<double>(), 2.0);
}

TEST(log_settings, names_parse_and_bad_values_are_refused) {
  EXPECT_EQ(parse_level("debug"), level::debug);
  EXPECT_EQ(parse_level("warning"), level::warn);
  EXPECT_EQ(parse_level("loud"), std::nullopt);
  EXPECT_EQ(parse_format("json"), format::json);
  EXPECT_EQ(parse_format("xml"), std::nullopt);
}

TEST(log_settings, the_environment_sets_and_carries_level_and_format) {
  ::setenv("SUPERNODE_LOG_LEVEL", "debug", 1);
  ::setenv("SUPERNODE_LOG_FORMAT", "json", 1);
  ::setenv("SUPERNODE_LOG_RATE_INTERVAL", "0.25", 1);
  configure_from_env();
  EXPECT_EQ(current_level(), level::debug);
  EXPECT_EQ(current_format(), format::json);
  EXPECT_EQ(default_rate_interval(), std::chrono::milliseconds(250));
  EXPECT_EQ(rate_limiter().interval(), std::chrono::milliseconds(250));
  // What the process settles on is what its children inherit.
  set_level(level::error);
  export_to_env();
  EXPECT_STREQ(std::getenv("SUPERNODE_LOG_LEVEL"), "error");
  EXPECT_STREQ(std::getenv("SUPERNODE_LOG_FORMAT"), "json");
  ::setenv("SUPERNODE_LOG_LEVEL", "loud", 1);
  EXPECT_THROW(configure_from_env(), std::invalid_argument);
  for (auto* v : {"SUPERNODE_LOG_LEVEL", "SUPERNODE_LOG_FORMAT", "SUPERNODE_LOG_RATE_INTERVAL"})
    ::unsetenv(v);
  set_level(level::info);
  set_format(format::text);
  set_default_rate_interval(1s);
}

} // namespace
} // namespace supernode::log
