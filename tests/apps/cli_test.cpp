// The `supernode` binary as a user runs it: real processes, real exit codes, JSON on stdout.

#include "../model/tiny_model.hpp"
#include "model/engine.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

using namespace supernode;

namespace {

struct run_result {
  int exit_code;
  std::string out; // stdout and stderr together
};

run_result run(const std::string& args) {
  const std::string cmd = std::string(SUPERNODE_BINARY_DIR) + "/apps/supernode " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string model_arg() {
  return "--model " + supernode::testing::tiny_model_dir().string();
}

} // namespace

TEST(cli, generate_json_equals_the_reference_engine) {
  auto r = run("generate " + model_arg() + " --prompt-ids 0,1000,2000,3000 --max-tokens 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_tokens"].get<std::vector<int32_t>>(),
            (std::vector<int32_t>{0, 1000, 2000, 3000}));
  EXPECT_TRUE(j.contains("prefill_ms"));
  EXPECT_TRUE(j.contains("decode_ms_per_token"));
  EXPECT_TRUE(j["text"].is_string());

  model::reference_engine e(supernode::testing::tiny_weights(model::precision::int8));
  model::generation_request req;
  req.prompt = {0, 1000, 2000, 3000};
  req.max_tokens = 5;
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), e.generate(req).tokens);
}

TEST(cli, text_prompts_and_fp32_precision) {
  auto r = run("generate " + model_arg() +
               " --prompt 'Hello, 世界' --max-tokens 3 --precision fp32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["prompt_tokens"][0], 0); // BOS
  EXPECT_EQ(j["tokens"].size(), 3u);
}

TEST(cli, tokenize_and_detokenize_round_trip) {
  auto r = run("tokenize " + model_arg() + " --text 'Supernode serves DeepSeek' --no-bos --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto ids = nlohmann::json::parse(r.out)["ids"].get<std::vector<int32_t>>();
  std::string list;
  for (auto id : ids) {
    if (!list.empty()) list += ',';
    list += std::to_string(id);
  }
  r = run("detokenize " + model_arg() + " --ids " + list);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "Supernode serves DeepSeek\n");
}

TEST(cli, bad_arguments_exit_2_with_a_reason) {
  auto r = run("generate " + model_arg() + " --prompt-ids 1,2 --max-tokens lots");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--max-tokens expects an integer"), std::string::npos) << r.out;
  r = run("generate " + model_arg() + " --prompt-ids 1,x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("bad item 'x'"), std::string::npos) << r.out;
  r = run("generate " + model_arg() + " --prompt-ids 1 --temprature 0.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown argument '--temprature'"), std::string::npos) << r.out;
  r = run("generate " + model_arg() + " --prompt-ids 1 --top-p 1.5");
  EXPECT_EQ(r.exit_code, 2);
  r = run("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
}

TEST(cli, log_options_set_format_and_level_before_or_after_the_command) {
  // JSON: the error line parses back and names the process; the usage text follows it.
  auto r = run("--log-format json generate " + model_arg() + " --prompt-ids 1 --max-tokens x");
  EXPECT_EQ(r.exit_code, 2);
  const auto first_line = r.out.substr(0, r.out.find('\n'));
  const auto j = nlohmann::json::parse(first_line);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["instance"], "supernode");
  EXPECT_NE(j["msg"].get<std::string>().find("--max-tokens expects an integer"), std::string::npos);
  // After the command, as --threads is; off silences the error line but not the exit code.
  r = run("generate " + model_arg() + " --prompt-ids 1 --max-tokens x --log-level off");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  // The environment sets them too (what `cluster up` hands its processes); bad values exit 2.
  r = run("--log-level loud generate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--log-level is trace, debug, info, warn, error or off, not 'loud'"),
            std::string::npos)
      << r.out;
  ::setenv("SUPERNODE_LOG_FORMAT", "json", 1);
  r = run("frobnicate");
  ::unsetenv("SUPERNODE_LOG_FORMAT");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out.rfind("{\"time\":", 0), 0u) << r.out;
}

TEST(cli, runtime_errors_exit_1_and_name_the_cause) {
  auto r = run("generate --model /nonexistent/model --prompt-ids 1 --max-tokens 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("/nonexistent/model"), std::string::npos) << r.out;
  r = run("generate " + model_arg() + " --prompt-ids 1,999999 --max-tokens 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("999999"), std::string::npos) << r.out;
}
