// The OpenAI-compatible API of `supernode serve` as clients see it: response and stream shapes,
// every error with its status and a message naming the problem, stop strings, and a client
// that leaves mid-stream freeing its KV blocks.

#include "serving_fixture.hpp"

#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <gtest/gtest.h>

using namespace supernode::testing;
using nlohmann::json;

namespace {

class serving_api : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    server = new serving_cluster("local.toml", tiny_model_dir(),
                                 {{{"model", "max_context", "1024"}},
                                  {{"gateway", "max_body_bytes", "16384"}},
                                  {{"gateway", "max_pending", "1"}},
                                  {{"gateway", "default_max_tokens", "7"}}});
  }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
  }
  static http_reply post(const std::string& path, const std::string& body) {
    return http_call(server->port(), "POST", path, body);
  }
  static http_reply get(const std::string& path) { return http_call(server->port(), "GET", path); }
  // The error's status and that its message mentions `needle`.
  static void expect_error(const http_reply& r, unsigned status, const std::string& needle) {
    EXPECT_EQ(r.status, status) << r.body;
    auto j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    const auto message = j["error"]["message"].get<std::string>();
    EXPECT_NE(message.find(needle), std::string::npos) << message;
  }
  static serving_cluster* server;
};
serving_cluster* serving_api::server = nullptr;

} // namespace

TEST_F(serving_api, models_health_and_metrics) {
  ASSERT_TRUE(server->up());
  auto models = json::parse(get("/v1/models").body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["max_model_len"], 1024);
  auto health = get("/health");
  EXPECT_EQ(health.status, 200u) << health.body;
  auto metrics = get("/metrics");
  EXPECT_EQ(metrics.status, 200u);
  EXPECT_NE(metrics.body.find("# TYPE supernode_gateway_requests_in_flight gauge"),
            std::string::npos);
}

TEST_F(serving_api, completion_and_chat_responses_have_the_openai_shape) {
  ASSERT_TRUE(server->up());
  auto r =
      post("/v1/completions",
           R"({"model":"tiny","prompt":"Hello","max_tokens":5,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["text"].is_string());
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(), j["usage"]["prompt_tokens"].get<int>() + 5);

  // Ids past the tokenizer but inside the model's padded vocabulary are valid input.
  auto padded =
      post("/v1/completions", R"({"model":"tiny","prompt":[129000,129270],"max_tokens":2})");
  EXPECT_EQ(padded.status, 200u) << padded.body;

  auto c = post(
      "/v1/chat/completions",
      R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(c.status, 200u) << c.body;
  auto cj = json::parse(c.body);
  EXPECT_EQ(cj["object"], "chat.completion");
  EXPECT_EQ(cj["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(cj["usage"]["completion_tokens"], 3);
}

TEST_F(serving_api, streams_one_chunk_per_token_then_usage_then_done) {
  ASSERT_TRUE(server->up());
  auto r =
      post("/v1/completions",
           R"({"model":"tiny","prompt":[5,6,7,8],"max_tokens":4,"temperature":0,"ignore_eos":true,)"
           R"("stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200u);
  EXPECT_NE(r.content_type.find("text/event-stream"), std::string::npos);
  auto events = sse_data(r.body);
  ASSERT_EQ(events.size(), 6u) << r.body; // 4 tokens, usage, [DONE]
  for (int i = 0; i < 4; ++i) {
    auto chunk = json::parse(events[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    ASSERT_EQ(chunk["choices"].size(), 1u);
    if (i < 3)
      EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
    else
      EXPECT_EQ(chunk["choices"][0]["finish_reason"], "length");
  }
  auto usage = json::parse(events[4]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  EXPECT_EQ(events[5], "[DONE]");
  // The streamed text is the non-streamed text.
  std::string streamed;
  for (int i = 0; i < 4; ++i)
    streamed += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  auto whole = post(
      "/v1/completions",
      R"({"model":"tiny","prompt":[5,6,7,8],"max_tokens":4,"temperature":0,"ignore_eos":true})");
  EXPECT_EQ(streamed, json::parse(whole.body)["choices"][0]["text"].get<std::string>());
}

TEST_F(serving_api, a_stop_string_cuts_the_text_before_it) {
  ASSERT_TRUE(server->up());
  const std::string base =
      R"({"model":"tiny","prompt":[11,12,13],"max_tokens":24,"temperature":0,"ignore_eos":true)";
  auto full = json::parse(post("/v1/completions", base + "}").body);
  const auto text = full["choices"][0]["text"].get<std::string>();
  ASSERT_GE(text.size(), 8u);
  // A stop string from the middle of the text (whole UTF-8 characters: cut at ASCII bytes).
  size_t at = text.size() / 2;
  while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0x80)) ++at;
  size_t len = 1;
  while (at + len < text.size() && !(static_cast<unsigned char>(text[at + len]) & 0x80) && len < 3)
    ++len;
  ASSERT_LT(at, text.size());
  const auto stop = text.substr(at, len);
  const auto expected = text.substr(0, text.find(stop));
  for (bool stream : {false, true}) {
    json body = json::parse(base + "}");
    body["stop"] = stop;
    body["stream"] = stream;
    auto r = post("/v1/completions", body.dump());
    ASSERT_EQ(r.status, 200u) << r.body;
    std::string got, finish;
    if (stream) {
      for (auto& e : sse_data(r.body)) {
        if (e == "[DONE]") break;
        auto c = json::parse(e);
        got += c["choices"][0]["text"].get<std::string>();
        if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
      }
    } else {
      auto j = json::parse(r.body);
      got = j["choices"][0]["text"];
      finish = j["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(got, expected) << "stop " << json(stop).dump() << (stream ? " (stream)" : "");
    EXPECT_EQ(finish, "stop");
  }
}

TEST_F(serving_api, bad_requests_get_openai_errors_naming_the_problem) {
  ASSERT_TRUE(server->up());
  expect_error(post("/v1/completions", "{not json"), 400, "JSON");
  expect_error(post("/v1/completions", R"({"prompt":"x"})"), 400, "model");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":42})"), 400, "prompt");
  expect_error(post("/v1/completions", R"({"model":"other","prompt":"x"})"), 404, "other");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":0})"), 400,
               "max_tokens");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":2000})"), 400,
               "maximum context length is 1024");
  json long_prompt = {{"model", "tiny"}, {"prompt", std::vector<int>(1100, 7)}};
  expect_error(post("/v1/completions", long_prompt.dump()), 400, "maximum context length");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":[1,2,999999999]})"), 400,
               "vocabulary");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","temperature":-1})"), 400,
               "temperature");
  expect_error(post("/v1/chat/completions", R"({"model":"tiny","messages":"hi"})"), 400,
               "messages");
  // Numbers beyond a double or beyond 64 bits: 400 naming the field, not a 500.
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":1e400})"), 400,
               "max_tokens");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","temperature":1e309})"), 400,
               "temperature");
  expect_error(post("/v1/chat/completions",
                    R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"seed":1e999})"),
               400, "seed");
  json huge = {{"model", "tiny"}, {"prompt", std::string(20000, 'a')}};
  auto big = post("/v1/completions", huge.dump());
  EXPECT_EQ(big.status, 413u) << big.body;
  expect_error(get("/v1/nothing"), 404, "/v1/nothing");
  expect_error(get("/v1/completions"), 405, "GET");
  // Nothing was left behind by the failures.
  EXPECT_EQ(metric(get("/metrics").body, "supernode_gateway_requests_in_flight"), 0.0);
}

TEST_F(serving_api, a_full_gateway_answers_429_and_a_client_leaving_mid_stream_frees_its_kv) {
  ASSERT_TRUE(server->up());
  namespace net = boost::asio;
  net::io_context io;
  net::ip::tcp::socket socket(io);
  socket.connect({net::ip::make_address("127.0.0.1"), server->port()});
  const std::string body =
      R"({"model":"tiny","prompt":[1,2,3],"max_tokens":1000,"temperature":0,"ignore_eos":true,"stream":true})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  net::write(socket, net::buffer(request));
  net::streambuf in;
  net::read_until(socket, in, "data: "); // streaming: the request holds KV blocks now

  // max_pending is 1: the next request is refused, not queued.
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":2})"), 429,
               "too many requests");

  socket.close(); // the client leaves mid-stream
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    const auto text = get("/metrics").body;
    if (metric(text, "supernode_gateway_requests_in_flight") == 0.0 &&
        metric(text, "supernode_kv_blocks_used", {{"instance", "decode-0"}}) == 0.0 &&
        metric(text, "supernode_instance_running", {{"instance", "decode-0"}}) == 0.0)
      break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << text;
  }
  auto after = post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":2})");
  EXPECT_EQ(after.status, 200u) << after.body;
}

// Without max_tokens a request generates [gateway] default_max_tokens (7 here), chat and
// completions alike.
TEST_F(serving_api, a_request_without_max_tokens_stops_at_default_max_tokens) {
  ASSERT_TRUE(server->up());
  auto r = post("/v1/completions",
                R"({"model":"tiny","prompt":[1,2,3],"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = json::parse(r.body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 7);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  auto c = post(
      "/v1/chat/completions",
      R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(c.status, 200u) << c.body;
  EXPECT_EQ(json::parse(c.body)["usage"]["completion_tokens"], 7);
}
