// The `supernode` binary as a user runs it: real processes, real exit codes, JSON on stdout.

#include "../model/tiny_model.hpp"
#include "model/engine.hpp"
#include "services/cluster/cluster_file.hpp"
#include "services/cluster/process_launcher.hpp"
#include "transport/toml_edit.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

using namespace supernode;

namespace {

struct run_result {
  int exit_code;
  std::string out; // stdout and stderr together
};

// `supernode ARGS...`, its stdout and stderr read together.
run_result run(const std::vector<std::string>& args,
               std::vector<std::pair<std::string, std::string>> env = {}) {
  services::cluster::launch_spec spec;
  spec.env = std::move(env);
  spec.argv = {std::string(SUPERNODE_BINARY_DIR) + "/apps/supernode"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.stdout_to = services::cluster::output_to::pipe;
  spec.stderr_to = services::cluster::output_to::pipe;
  auto child = services::cluster::child_process::launch(spec);
  std::string out;
  child.for_each_line([&](const std::string& line) { out += line + "\n"; });
  return {child.wait().code(), out};
}

// The JSON report a bench command prints after its log lines (a failure, and null, if none).
nlohmann::json report_of(const run_result& r) {
  const auto json_start = r.out.find("\n{\n");
  if (json_start == std::string::npos) {
    ADD_FAILURE() << "no JSON report in:\n" << r.out;
    return nullptr;
  }
  return nlohmann::json::parse(r.out.substr(json_start + 1));
}

// A bench's {median, best, worst} of repeated ratios: positive and in order.
void expect_ordered_spread(const nlohmann::json& spread) {
  const double worst = spread.at("worst"), median = spread.at("median"), best = spread.at("best");
  EXPECT_GT(worst, 0.0) << spread.dump();
  EXPECT_LE(worst, median) << spread.dump();
  EXPECT_LE(median, best) << spread.dump();
}

std::string tiny() {
  return supernode::testing::tiny_model_dir().string();
}

// `args` with --model and the tiny model after the command (the first argument).
std::vector<std::string> with_model(std::vector<std::string> args) {
  args.insert(args.begin() + 1, {"--model", supernode::testing::tiny_model_dir().string()});
  return args;
}

} // namespace

TEST(cli, generate_json_equals_the_reference_engine) {
  auto r = run(
      with_model({"generate", "--prompt-ids", "0,1000,2000,3000", "--max-tokens", "5", "--json"}));
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
  auto r = run(with_model({"generate", "--prompt", "Hello, 世界", "--max-tokens", "3",
                           "--precision", "fp32", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["prompt_tokens"][0], 0); // BOS
  EXPECT_EQ(j["tokens"].size(), 3u);
}

TEST(cli, tokenize_and_detokenize_round_trip) {
  auto r =
      run(with_model({"tokenize", "--text", "Supernode serves DeepSeek", "--no-bos", "--json"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto ids = nlohmann::json::parse(r.out)["ids"].get<std::vector<int32_t>>();
  std::string list;
  for (auto id : ids) {
    if (!list.empty()) list += ',';
    list += std::to_string(id);
  }
  r = run(with_model({"detokenize", "--ids", list}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, "Supernode serves DeepSeek\n");
}

TEST(cli, bad_arguments_exit_2_with_a_reason) {
  auto r = run(with_model({"generate", "--prompt-ids", "1,2", "--max-tokens", "lots"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--max-tokens expects an integer"), std::string::npos) << r.out;
  r = run(with_model({"generate", "--prompt-ids", "1,x"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("bad item 'x'"), std::string::npos) << r.out;
  r = run(with_model({"generate", "--prompt-ids", "1", "--temprature", "0.5"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("unknown argument '--temprature'"), std::string::npos) << r.out;
  r = run(with_model({"generate", "--prompt-ids", "1", "--top-p", "1.5"}));
  EXPECT_EQ(r.exit_code, 2);
  r = run({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(cli, log_options_set_format_and_level_before_or_after_the_command) {
  // JSON: the error line parses back and names the process; the usage text follows it.
  auto r = run({"--log-format", "json", "generate", "--model", tiny(), "--prompt-ids", "1",
                "--max-tokens", "x"});
  EXPECT_EQ(r.exit_code, 2);
  const auto first_line = r.out.substr(0, r.out.find('\n'));
  const auto j = nlohmann::json::parse(first_line);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["instance"], "supernode");
  EXPECT_NE(j["msg"].get<std::string>().find("--max-tokens expects an integer"), std::string::npos);
  // After the command, as --threads is; off silences the error line but not the exit code.
  r = run(with_model({"generate", "--prompt-ids", "1", "--max-tokens", "x", "--log-level", "off"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  // The environment sets them too (what `cluster up` hands its processes); bad values exit 2.
  r = run({"--log-level", "loud", "generate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--log-level is trace, debug, info, warn, error or off, not 'loud'"),
            std::string::npos)
      << r.out;
  r = run({"frobnicate"}, {{"SUPERNODE_LOG_FORMAT", "json"}});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out.rfind("{\"time\":", 0), 0u) << r.out;
}

TEST(cli, runtime_errors_exit_1_and_name_the_cause) {
  auto r =
      run({"generate", "--model", "/nonexistent/model", "--prompt-ids", "1", "--max-tokens", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("/nonexistent/model"), std::string::npos) << r.out;
  r = run(with_model({"generate", "--prompt-ids", "1,999999", "--max-tokens", "1"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("999999"), std::string::npos) << r.out;
}

TEST(cli, a_misspelled_config_key_stops_serve_before_anything_starts) {
  // configs/local.toml with [decode] max_batch misspelled.
  const std::filesystem::path shipped = std::filesystem::path(SUPERNODE_SOURCE_DIR) / "configs";
  std::ifstream in(shipped / "local.toml");
  std::stringstream text;
  text << in.rdbuf();
  const auto dir =
      std::filesystem::temp_directory_path() / ("supernode-cli-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto config = dir / "typo.toml";
  std::ofstream(config) << transport::set_toml_key(text.str(), "decode", "max_bach", "8");

  // serve refuses the file at start: exit 1 with file, line, table, key and the key meant, and
  // no instance listening.
  auto r = run(with_model({"serve", "--config", config.string(), "--port", "0"}));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find(config.string() + ":"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[decode] unknown key 'max_bach' (did you mean 'max_batch'?)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;

  // `config check` says the same without a model, and passes the file as shipped.
  r = run({"config", "check", "--config", config.string()});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("did you mean 'max_batch'?"), std::string::npos) << r.out;
  r = run({"config", "check", "--config", (shipped / "local.toml").string()});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("ok"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

namespace {

// configs/local.toml with its run folder at `run_dir`, written into `dir`.
std::filesystem::path config_with_run_dir(const std::filesystem::path& dir,
                                          const std::filesystem::path& run_dir) {
  std::ifstream in(std::filesystem::path(SUPERNODE_SOURCE_DIR) / "configs" / "local.toml");
  std::stringstream text;
  text << in.rdbuf();
  const auto config = dir / "run_dir.toml";
  std::string quoted = "\"";
  quoted += run_dir.string();
  quoted += '"';
  std::ofstream(config) << transport::set_toml_key(text.str(), "cluster", "run_dir", quoted);
  return config;
}

// The refusal both `serve` and a role process print for `run_dir`: exit 1, the text that must
// be in it, and no instance listening.
void expect_refused(const std::filesystem::path& config, const std::string& must_say) {
  for (const auto& args :
       {with_model({"serve", "--config", config.string(), "--port", "0"}),
        std::vector<std::string>{"role", "all", "--config", config.string(), "--id", "0"}}) {
    auto r = run(args);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.out;
    EXPECT_NE(r.out.find(must_say), std::string::npos) << args[0] << ": " << r.out;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << args[0] << ": " << r.out;
  }
}

} // namespace

TEST(cli, a_run_folder_of_another_user_is_refused_naming_its_path_and_owner) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a folder as another user (nobody)";
  const auto dir =
      std::filesystem::temp_directory_path() / ("supernode-cli-rd-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::all); // nobody may create in it
  const auto run_dir = dir / "theirs";
  services::cluster::launch_spec mkdir_as_nobody;
  mkdir_as_nobody.argv = {"runuser", "-u", "nobody", "--", "mkdir", "-m", "0700", run_dir.string()};
  ASSERT_TRUE(services::cluster::child_process::launch(mkdir_as_nobody).wait().success());
  const auto config = config_with_run_dir(dir, run_dir);
  expect_refused(config, "refusing folder " + run_dir.string() + ": it belongs to nobody");
  EXPECT_TRUE(std::filesystem::is_empty(run_dir)) << "something was made in the refused folder";
  std::filesystem::remove_all(dir);
}

TEST(cli, a_run_folder_anyone_may_write_is_refused_naming_its_mode) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("supernode-cli-rw-" + std::to_string(::getpid()));
  const auto run_dir = dir / "open";
  std::filesystem::create_directories(run_dir);
  std::filesystem::permissions(run_dir, std::filesystem::perms::all);
  const auto config = config_with_run_dir(dir, run_dir);
  expect_refused(config, "refusing folder " + run_dir.string());
  expect_refused(config, "mode 0777");
  EXPECT_TRUE(std::filesystem::is_empty(run_dir)) << "something was made in the refused folder";
  std::filesystem::remove_all(dir);
}

TEST(cli, cluster_keys_makes_the_missing_pairs_privately_and_only_once) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("supernode-cli-keys-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto keys = dir / "keys";
  const auto config = dir / "keys.toml";
  // A run folder of its own too: the config's is the user's cluster's, not this test's.
  services::cluster::cluster_file::read(std::filesystem::path(SUPERNODE_SOURCE_DIR) / "configs" /
                                        "pdc-1p1d.toml")
      .set_string("cluster", "key_dir", keys.string())
      .set_string("cluster", "run_dir", (dir / "run").string())
      .write(config);

  auto r = run({"cluster", "keys", "--config", config.string()});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find(keys.string() + ": made 4 key pair(s), 0 instance(s) had theirs"),
            std::string::npos)
      << r.out;
  for (const char* instance : {"gateway-0", "scheduler-0", "prefill-0", "decode-0"}) {
    EXPECT_NE(r.out.find(std::string("made ") + instance + ".secret"), std::string::npos) << r.out;
    const auto secret = std::filesystem::status(keys / (std::string(instance) + ".secret"));
    EXPECT_EQ(secret.permissions(),
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  EXPECT_EQ(std::filesystem::status(keys).permissions(), std::filesystem::perms::owner_all);

  // Again: nothing missing, nothing made, the pairs stay as they were.
  std::ifstream before_in(keys / "decode-0.public");
  const std::string before((std::istreambuf_iterator<char>(before_in)), {});
  r = run({"cluster", "keys", "--config", config.string()});
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("made 0 key pair(s), 4 instance(s) had theirs"), std::string::npos) << r.out;
  std::ifstream after_in(keys / "decode-0.public");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(after_in)), {}), before);
  std::filesystem::remove_all(dir);
}

TEST(cli, bench_model_pairs_each_prefill_run_with_its_own_peak_probe) {
  const auto r = run({"bench", "model", "--model", tiny(), "--prefill-only", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto report = report_of(r);
  const auto& row = report.at("prefill").at(0);
  if (report.at("int8_peak_gops_all_threads").get<double>() <= 0.0) {
    // The portable kernels have no INT8 instruction to probe, so there is nothing to pair with.
    EXPECT_FALSE(row.contains("paired_fraction_of_int8_peak")) << row.dump();
    return;
  }
  expect_ordered_spread(row.at("paired_fraction_of_int8_peak"));
}

TEST(cli, bench_kernels_pairs_ours_with_onednn_and_the_peak_probe_round_by_round) {
  const auto r = run({"bench", "kernels", "--quick", "--int8-only", "--shapes", "kv_b", "--m", "8",
                      "--pairs", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto report = report_of(r);
  const auto& row = report.at("results").at(0);
  // Each paired figure: three rounds, positive and ordered, and the summary's geomean of its
  // median (one row, so the median itself).
  auto expect_paired = [&](const char* key) {
    const auto& paired = row.at(key);
    ASSERT_EQ(paired.at("ratios").size(), 3u) << paired.dump();
    expect_ordered_spread(paired);
    EXPECT_EQ(report.at("summary").at(std::string(key) + "_median_geomean").at("m8"),
              paired.at("median"));
  };
  // Each round's rate against the probe run beside it, on any path with an INT8 instruction.
  if (row.at("ours_int8").at("isa") != "portable") expect_paired("fraction_of_exact_peak_paired");
  if (!row.contains("onednn_int8")) {
    // Without oneDNN (not built in, or no ISA it runs) there is nothing to pair with.
    EXPECT_FALSE(row.contains("int8_speedup_vs_onednn_paired")) << row.dump();
    return;
  }
  expect_paired("int8_speedup_vs_onednn_paired");
}

TEST(cli, the_heap_asks_glibc_for_huge_pages_unless_turned_off) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's allocator ignores glibc's tunables";
#endif
  // `bench model` reports what its process runs with (after main() re-executed it).
  auto heap_huge_pages = [](const run_result& r) {
    return report_of(r)["heap_huge_pages"].get<bool>();
  };
  const std::vector<std::string> bench = {"bench", "model",          "--model",
                                          tiny(),  "--prefill-only", "1"};
  const auto on = run(bench);
  ASSERT_EQ(on.exit_code, 0) << on.out;
  EXPECT_TRUE(heap_huge_pages(on)) << "glibc before 2.35 has no malloc.hugetlb tunable";
  const auto off = run(bench, {{"SUPERNODE_HUGE_PAGES", "0"}});
  ASSERT_EQ(off.exit_code, 0) << off.out;
  EXPECT_FALSE(heap_huge_pages(off));
}
