#include "services/gateway/openai_api.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace supernode::services::gateway;
using json = nlohmann::json;

namespace {

// The api_error a body produces; fails the test if it parses.
api_error parse_error(std::string_view body, api_kind kind = api_kind::completion) {
  try {
    parse_completion_request(body, kind);
  } catch (const api_error& e) {
    return e;
  }
  ADD_FAILURE() << "parsed without error: " << body;
  return api_error(0, "");
}

// A minimal valid completions body with `extra` fields merged in.
std::string completion_body(const json& extra) {
  json body = {{"model", "m"}, {"prompt", "Hello"}};
  body.update(extra);
  return body.dump();
}

std::string chat_body(const json& extra) {
  json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  body.update(extra);
  return body.dump();
}

struct error_case {
  json extra;        // merged into a valid body
  std::string param; // expected api_error::param
};

} // namespace

TEST(openai_api, valid_completion_parses_with_defaults) {
  const auto r =
      parse_completion_request(R"({"model":"demo","prompt":"Hello"})", api_kind::completion);
  EXPECT_EQ(r.kind, api_kind::completion);
  EXPECT_EQ(r.model, "demo");
  ASSERT_TRUE(r.prompt_text);
  EXPECT_EQ(*r.prompt_text, "Hello");
  EXPECT_TRUE(r.prompt_ids.empty());
  EXPECT_FALSE(r.max_tokens);
  EXPECT_EQ(r.temperature, 1.0f);
  EXPECT_EQ(r.top_p, 1.0f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_FALSE(r.seed);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.ignore_eos);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
}

TEST(openai_api, every_field_is_read) {
  const auto r =
      parse_completion_request(completion_body({{"max_tokens", 7},
                                                {"temperature", 0.5},
                                                {"top_p", 0.9},
                                                {"top_k", 40},
                                                {"seed", 42},
                                                {"stop", {"\n", "END"}},
                                                {"ignore_eos", true},
                                                {"stream", true},
                                                {"stream_options", {{"include_usage", true}}},
                                                {"n", 1},
                                                {"best_of", 1},
                                                {"logprobs", nullptr},
                                                {"echo", false},
                                                {"user", "ignored: unknown fields are fine"}}),
                               api_kind::completion);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(openai_api, prompt_forms) {
  auto ids = parse_completion_request(completion_body({{"prompt", {0, 5, 2147483647}}}),
                                      api_kind::completion);
  EXPECT_FALSE(ids.prompt_text);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{0, 5, 2147483647}));
  // A batch of one is its single prompt.
  auto one =
      parse_completion_request(completion_body({{"prompt", {"only"}}}), api_kind::completion);
  EXPECT_EQ(one.prompt_text, "only");
  auto nested =
      parse_completion_request(completion_body({{"prompt", {{1, 2}}}}), api_kind::completion);
  EXPECT_EQ(nested.prompt_ids, (std::vector<int32_t>{1, 2}));
}

TEST(openai_api, chat_parses_messages_and_max_completion_tokens) {
  const auto r =
      parse_completion_request(chat_body({{"messages",
                                           {{{"role", "system"}, {"content", "Be brief."}},
                                            {{"role", "user"}, {"content", "Hi"}}}},
                                          {"max_tokens", 5},
                                          {"max_completion_tokens", 9},
                                          {"top_k", -1},
                                          {"logprobs", false}}),
                               api_kind::chat);
  EXPECT_EQ(r.kind, api_kind::chat);
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hi");
  EXPECT_EQ(r.max_tokens, 9); // the newer field wins
  EXPECT_EQ(r.top_k, 0);      // -1 means off, like vLLM
  EXPECT_FALSE(r.prompt_text);
}

TEST(openai_api, body_errors) {
  auto e = parse_error("{\"model\": ");
  EXPECT_EQ(e.status, 400u);
  EXPECT_EQ(e.param, "");
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_EQ(std::string(e.what()).rfind("malformed JSON: ", 0), 0u) << e.what();

  e = parse_error("[1, 2]");
  EXPECT_EQ(e.status, 400u);
  EXPECT_NE(std::string(e.what()).find("JSON object"), std::string::npos) << e.what();

  e = parse_error(R"({"prompt": "x"})");
  EXPECT_EQ(e.param, "model");
  EXPECT_NE(std::string(e.what()).find("\"model\""), std::string::npos);
  e = parse_error(R"({"model": "m"})");
  EXPECT_EQ(e.param, "prompt");
  e = parse_error(R"({"model": "m"})", api_kind::chat);
  EXPECT_EQ(e.param, "messages");
}

TEST(openai_api, completion_field_errors_name_the_field) {
  const std::vector<error_case> cases = {
      {{{"model", 3}}, "model"},
      {{{"model", ""}}, "model"},
      {{{"prompt", 3}}, "prompt"},
      {{{"prompt", json::array()}}, "prompt"},
      {{{"prompt", {"a", "b"}}}, "prompt"}, // batch prompts
      {{{"prompt", {{1}, {2}}}}, "prompt"},
      {{{"prompt", {1, -2}}}, "prompt"},
      {{{"prompt", {1, 2.5}}}, "prompt"},
      {{{"prompt", {1, 4294967296}}}, "prompt"},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"max_tokens", -3}}, "max_tokens"},
      {{{"max_tokens", "5"}}, "max_tokens"},
      {{{"max_tokens", 1.5}}, "max_tokens"},
      {{{"max_tokens", 4294967296}}, "max_tokens"},
      {{{"temperature", -0.1}}, "temperature"},
      {{{"temperature", 2.1}}, "temperature"},
      {{{"temperature", "hot"}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_p", 1.01}}, "top_p"},
      {{{"top_k", -2}}, "top_k"},
      {{{"top_k", 1.5}}, "top_k"},
      {{{"seed", -1}}, "seed"},
      {{{"seed", "7"}}, "seed"},
      {{{"stop", 3}}, "stop"},
      {{{"stop", ""}}, "stop"},
      {{{"stop", {"a", ""}}}, "stop"},
      {{{"stop", {"a", 1}}}, "stop"},
      {{{"stop", json::array({"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13",
                              "14", "15", "16", "17"})}},
       "stop"},
      {{{"ignore_eos", "yes"}}, "ignore_eos"},
      {{{"stream", 1}}, "stream"},
      {{{"stream_options", {{"include_usage", true}}}}, "stream_options"}, // without stream
      {{{"stream", true}, {"stream_options", 3}}, "stream_options"},
      {{{"stream", true}, {"stream_options", {{"include_usage", "yes"}}}}, "stream_options"},
      {{{"n", 2}}, "n"},
      {{{"n", "1"}}, "n"},
      {{{"best_of", 3}}, "best_of"},
      {{{"logprobs", 0}}, "logprobs"},
      {{{"logprobs", 5}}, "logprobs"},
      {{{"echo", true}}, "echo"},
      {{{"suffix", "tail"}}, "suffix"},
      {{{"tools", {{{"type", "function"}}}}}, "tools"},
      {{{"functions", {{{"name", "f"}}}}}, "functions"},
      {{{"response_format", {{"type", "json_object"}}}}, "response_format"},
  };
  for (const auto& c : cases) {
    const auto e = parse_error(completion_body(c.extra));
    EXPECT_EQ(e.status, 400u) << c.extra.dump();
    EXPECT_EQ(e.param, c.param) << c.extra.dump() << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("\"" + c.param + "\""), std::string::npos)
        << c.extra.dump() << ": " << e.what();
  }
  // The first batch case says why.
  EXPECT_NE(
      std::string(parse_error(completion_body({{"prompt", {"a", "b"}}})).what()).find("batch"),
      std::string::npos);
}

TEST(openai_api, chat_field_errors_name_the_field) {
  const std::vector<error_case> cases = {
      {{{"messages", "Hi"}}, "messages"},
      {{{"messages", json::array()}}, "messages"},
      {{{"messages", {{{"role", "tool"}, {"content", "x"}}}}}, "messages"},
      {{{"messages", {{{"role", "user"}, {"content", 3}}}}}, "messages"},
      {{{"max_completion_tokens", 0}}, "max_completion_tokens"},
      {{{"logprobs", true}}, "logprobs"},
      {{{"top_logprobs", 2}}, "top_logprobs"},
  };
  for (const auto& c : cases) {
    const auto e = parse_error(chat_body(c.extra), api_kind::chat);
    EXPECT_EQ(e.status, 400u) << c.extra.dump();
    EXPECT_EQ(e.param, c.param) << c.extra.dump() << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("\"" + c.param + "\""), std::string::npos)
        << c.extra.dump() << ": " << e.what();
  }
}

TEST(openai_api, neutral_values_of_unsupported_fields_are_accepted) {
  EXPECT_NO_THROW(parse_completion_request(chat_body({{"tools", json::array()},
                                                      {"response_format", {{"type", "text"}}},
                                                      {"top_logprobs", 0},
                                                      {"n", nullptr}}),
                                           api_kind::chat));
}

TEST(openai_api, error_body_has_the_openai_shape) {
  auto j = json::parse(error_body(api_error(400, "bad \"x\"", "invalid_request_error", "x")));
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], "bad \"x\"");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "x");
  EXPECT_TRUE(j["error"]["code"].is_null());
  j = json::parse(error_body(api_error(503, "busy", "server_error", "", "overloaded")));
  EXPECT_TRUE(j["error"]["param"].is_null());
  EXPECT_EQ(j["error"]["code"], "overloaded");
}

namespace {

completion_result sample_result() {
  completion_result r;
  r.id = "cmpl-1";
  r.created = 1700000000;
  r.model = "demo";
  r.text = "Hello!";
  r.finish_reason = "length";
  r.prompt_tokens = 3;
  r.completion_tokens = 4;
  return r;
}

void expect_envelope(const json& j, std::string_view object) {
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["object"], object);
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "demo");
}

} // namespace

TEST(openai_api, completion_response_shape) {
  const json j = json::parse(completion_response(api_kind::completion, sample_result()));
  expect_envelope(j, "text_completion");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["text"], "Hello!");
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(j["usage"],
            json({{"prompt_tokens", 3}, {"completion_tokens", 4}, {"total_tokens", 7}}));
}

TEST(openai_api, chat_response_shape) {
  const json j = json::parse(completion_response(api_kind::chat, sample_result()));
  expect_envelope(j, "chat.completion");
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"], json({{"role", "assistant"}, {"content", "Hello!"}}));
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_FALSE(c.contains("text"));
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
}

TEST(openai_api, chat_stream_chunks) {
  const completion_result meta = sample_result();
  json role = json::parse(stream_chunk(api_kind::chat, meta, "", nullptr, true));
  expect_envelope(role, "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(role["usage"].is_null());

  json text = json::parse(stream_chunk(api_kind::chat, meta, "Hel", nullptr));
  EXPECT_EQ(text["choices"][0]["delta"], json({{"content", "Hel"}}));
  EXPECT_EQ(text["choices"][0]["index"], 0);

  const std::string stop = "stop";
  json last = json::parse(stream_chunk(api_kind::chat, meta, "", &stop));
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");

  json usage = json::parse(usage_chunk(api_kind::chat, meta));
  expect_envelope(usage, "chat.completion.chunk");
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
}

TEST(openai_api, completion_stream_chunks) {
  const completion_result meta = sample_result();
  json text = json::parse(stream_chunk(api_kind::completion, meta, "lo", nullptr));
  expect_envelope(text, "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "lo");
  EXPECT_TRUE(text["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(text["choices"][0]["finish_reason"].is_null());
  const std::string length = "length";
  json last = json::parse(stream_chunk(api_kind::completion, meta, "", &length));
  EXPECT_EQ(last["choices"][0]["text"], "");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  json usage = json::parse(usage_chunk(api_kind::completion, meta));
  EXPECT_EQ(usage["object"], "text_completion");
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_EQ(stream_done, "[DONE]");
}

TEST(openai_api, invalid_utf8_text_renders_with_replacement) {
  completion_result r = sample_result();
  r.text = "ok\xE4\xBD"; // cut inside a three-byte character
  std::string out;
  ASSERT_NO_THROW(out = completion_response(api_kind::chat, r));
  EXPECT_EQ(json::parse(out)["choices"][0]["message"]["content"], "ok\xEF\xBF\xBD");
  ASSERT_NO_THROW(out = stream_chunk(api_kind::completion, r, "\xFF", nullptr));
  EXPECT_EQ(json::parse(out)["choices"][0]["text"], "\xEF\xBF\xBD");
  ASSERT_NO_THROW(error_body(api_error(400, "bad \xC3")));
}

TEST(openai_api, models_response_shape) {
  const json j = json::parse(
      models_response({{"demo", 1700000000, "supernode", 4096}, {"other", 1, "someone", 128}}));
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0], json({{"id", "demo"},
                                {"object", "model"},
                                {"created", 1700000000},
                                {"owned_by", "supernode"},
                                {"max_model_len", 4096}}));
  EXPECT_EQ(j["data"][1]["owned_by"], "someone");
  EXPECT_EQ(json::parse(models_response({}))["data"], json::array());
}

// Numbers beyond a double (1e400 makes nlohmann's parser throw out_of_range) and integers beyond
// 64 bits (parsed as doubles) are the client's mistake: 400 naming the field, never a 500.
TEST(openai_api, overflowing_numbers_are_400_naming_the_field) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("max_tokens":1e400)", "max_tokens"},
      {R"("temperature":1e309)", "temperature"},
      {R"("top_p":-1e999)", "top_p"},
      {R"("n":1e400)", "n"},
      {R"("seed":1e400)", "seed"},
      {R"("max_tokens":100000000000000000000000)", "max_tokens"},
      {R"("seed":18446744073709551616)", "seed"},
      {R"("top_k":99999999999999999999999)", "top_k"},
      {R"("n":100000000000000000000)", "n"},
  };
  for (const auto& [field, param] : cases) {
    const std::string body = R"({"model":"m","prompt":"Hello",)" + field + "}";
    const api_error e = parse_error(body);
    EXPECT_EQ(e.status, 400u) << body;
    EXPECT_EQ(e.param, param) << body;
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
  }
  // In a nested object: the top-level field that holds it.
  const api_error nested =
      parse_error(R"({"model":"m","prompt":"x","stream":true,"stream_options":{"a":1e400}})");
  EXPECT_EQ(nested.param, "stream_options");
}
