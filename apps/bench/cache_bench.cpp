#include "apps/bench/cache_bench.hpp"

#include "apps/bench/bench_report.hpp"
#include "apps/bench/cache_bench_plot.hpp"
#include "apps/bench/cache_bench_sweep.hpp"
#include "apps/bench/stop_signals.hpp"
#include "apps/cli_args.hpp"
#include "apps/commands.hpp"
#include "apps/serving_setup.hpp"
#include "services/cluster/cluster_file.hpp"
#include "services/loadgen/workload.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace supernode::apps {

namespace lg = services::loadgen;
namespace fs = std::filesystem;

namespace {

constexpr const char* usage = R"(usage: supernode bench cache [options]

The context-cache reuse sweep (the paper's Figure 23). For each EMS read path it starts a
multi-process cluster from configs/pdc-ems.toml (MP controller, 2 MP servers, 1 prefill,
1 decode, gateway+scheduler) with the context cache on, and for each reuse rate R sends prompts
whose first round(R * len) tokens are a prefix already in the pool (one warm-up request put it
there) and the rest unique. Prints prefill throughput (prompt tokens / s), TTFT and the reuse
the prefill instance measured (hit / looked-up tokens, from /metrics) as JSON on stdout, and
plots throughput and mean TTFT against R.

  --model DIR            model folder to serve (default models/demo, made on first use)
  --paths LIST           read paths, from ub (pool over the UB plane, blocks copied out of the
                         server's mapped DRAM) and vpc (pool over ZeroMQ tcp, bytes in the
                         reply) (default ub,vpc)
  --rates LIST           reuse rates in [0, 1] (default 0,0.125,0.25,0.5,0.75,0.9); speedups
                         are over the lowest
  --prompt-len N         tokens per prompt (default 1024; --quick 256)
  --num-prompts N        measured prompts per rate (default 16; --quick 6)
  --concurrency C        measured prompts in flight (default 4)
  --block-tokens B       [ems] block_tokens, tokens per cache block, a multiple of [kv]
                         block_size (default 128; --quick 32, so short prompts still have
                         several blocks)
  --seed S               prompts follow from S (default 0)
  --timeout-s T          per-request deadline (default 600)
  --base-config FILE     the config the clusters derive from (default configs/pdc-ems.toml,
                         under $SUPERNODE_HOME, the current folder or the binary's)
  --svg FILE             the plot (default cache_bench.svg)
  --json FILE            also write the JSON report to FILE
  --quick                the smaller defaults above

Every request asks for one greedy token, so a request is its prefill. Each cluster runs in a
fresh folder under the temporary folder and is taken down at the end, also on error or ^C.
Exit status 0 when every rate point completed requests, 1 otherwise, 2 on bad options.
)";

constexpr double default_rates[] = {0, 0.125, 0.25, 0.5, 0.75, 0.9};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) out.push_back(item);
  if (!text.empty() && text.back() == ',') out.emplace_back();
  return out;
}

std::vector<double> parse_rates(const std::string& text) {
  std::vector<double> rates;
  for (auto& item : split_list(text)) {
    char* end = nullptr;
    const double r = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size())
      throw usage_error("--rates expects comma-separated numbers; bad item '" + item + "'");
    if (!(r >= 0 && r <= 1)) throw usage_error("--rates: " + item + " is not in [0, 1]");
    rates.push_back(r);
  }
  if (rates.empty()) throw usage_error("--rates needs at least one rate");
  std::sort(rates.begin(), rates.end());
  rates.erase(std::unique(rates.begin(), rates.end()), rates.end());
  return rates;
}

std::vector<std::string> parse_paths(const std::string& text) {
  std::vector<std::string> paths;
  for (auto& item : split_list(text)) {
    if (item != "ub" && item != "vpc")
      throw usage_error("--paths expects ub and/or vpc, comma-separated; bad item '" + item + "'");
    if (std::find(paths.begin(), paths.end(), item) == paths.end()) paths.push_back(item);
  }
  if (paths.empty()) throw usage_error("--paths needs at least one of ub, vpc");
  return paths;
}

// The config the clusters derive from: --base-config, else configs/pdc-ems.toml under
// $SUPERNODE_HOME, the current folder, or a folder above the binary (a build tree in the repo).
fs::path find_base_config(const std::optional<std::string>& given) {
  if (given) {
    if (!fs::is_regular_file(*given)) throw usage_error("--base-config: no file " + *given);
    return *given;
  }
  const fs::path rel = fs::path("configs") / "pdc-ems.toml";
  std::vector<fs::path> tried;
  if (const char* home = std::getenv("SUPERNODE_HOME")) tried.push_back(fs::path(home) / rel);
  tried.push_back(rel);
  std::error_code ec;
  for (auto dir = fs::canonical("/proc/self/exe", ec).parent_path(); !ec && !dir.empty();
       dir = dir.parent_path()) {
    tried.push_back(dir / rel);
    if (dir == dir.root_path()) break;
  }
  for (auto& p : tried)
    if (fs::is_regular_file(p)) return p;
  throw std::runtime_error("cannot find " + rel.string() +
                           " (under $SUPERNODE_HOME, the current folder or the binary's "
                           "folders): pass --base-config FILE");
}

cache_bench_options parse_options(cli_args& args) {
  cache_bench_options o;
  o.quick = args.take_flag("--quick");
  const auto model = args.take("--model");
  o.paths = parse_paths(args.take_or("--paths", "ub,vpc"));
  if (auto r = args.take("--rates"))
    o.rates = parse_rates(*r);
  else
    o.rates.assign(std::begin(default_rates), std::end(default_rates));
  o.prompt_len = args.take_int("--prompt-len", o.quick ? 256 : 1024, 2, 1 << 20);
  o.num_prompts = args.take_int("--num-prompts", o.quick ? 6 : 16, 1, 100000);
  o.concurrency = args.take_int("--concurrency", 4, 1, 4096);
  o.block_tokens = args.take_int("--block-tokens", o.quick ? 32 : 128, 1, 65536);
  o.seed = static_cast<uint64_t>(args.take_int("--seed", 0, 0, INT64_MAX));
  o.timeout_s = args.take_double("--timeout-s", 600, 1e-3, 1e9);
  const auto base = args.take("--base-config");
  o.svg = args.take_or("--svg", o.svg);
  o.json = args.take("--json");
  args.expect_consumed("bench cache");
  o.base_config = find_base_config(base);
  o.model = fs::absolute(resolve_model_dir(model)).lexically_normal();
  if (o.model.filename().empty()) o.model = o.model.parent_path(); // "DIR/": the id is DIR
  if (!fs::exists(o.model / "config.json"))
    throw usage_error("--model: no model at " + o.model.string() + " (config.json is missing)");
  return o;
}

int32_t token_end_of(const fs::path& model) {
  std::ifstream in(model / "config.json");
  const auto j = nlohmann::json::parse(in, nullptr, false);
  int64_t vocab = lg::first_special_token;
  if (j.is_object() && j.contains("vocab_size") && j["vocab_size"].is_number_integer())
    vocab = j["vocab_size"].get<int64_t>();
  const auto end = static_cast<int32_t>(std::min<int64_t>(vocab, lg::first_special_token));
  if (end <= lg::first_random_token)
    throw std::runtime_error("the model at " + model.string() + " has a vocabulary of " +
                             std::to_string(vocab) + " tokens; the prompts need more than " +
                             std::to_string(lg::first_random_token));
  return end;
}

nlohmann::ordered_json point_json(const rate_point& p, int64_t len) {
  nlohmann::ordered_json j;
  j["rate"] = p.rate;
  j["shared_prefix_tokens"] = p.shared_tokens;
  j["expected_reuse"] = static_cast<double>(p.expected_hit_tokens) / static_cast<double>(len);
  j["measured_reuse"] = p.measured_reuse ? nlohmann::ordered_json(*p.measured_reuse) : nullptr;
  j["completed"] = p.completed;
  j["failed"] = p.failed;
  if (p.failed > 0) j["first_failure"] = p.first_failure;
  j["prompt_tokens"] = p.prompt_tokens;
  j["duration_s"] = p.duration_s;
  j["prefill_throughput_tok_s"] = p.throughput;
  j["ttft_ms"] = {{"mean", p.ttft.mean}, {"p50", p.ttft.p50}, {"p90", p.ttft.p90}};
  j["pool_load"] = {{"ms_per_prompt", p.load_ms_per_prompt},
                    {"mb_per_prompt", p.loaded_mb_per_prompt},
                    {"gb_per_s", p.load_gb_per_s}};
  j["prefix_stored_before_run"] = p.warm;
  return j;
}

// The base config's [kv] block_size and [model] max_context bound the options.
void check_against_base(const cache_bench_options& o, const std::string& base_text) {
  const auto base = parse_serving_setup(base_text, o.base_config.string(), std::nullopt, false);
  if (o.block_tokens % base.serving.block_size != 0)
    throw usage_error("--block-tokens " + std::to_string(o.block_tokens) +
                      " must be a multiple of [kv] block_size " +
                      std::to_string(base.serving.block_size) + " of " + o.base_config.string());
  if (o.prompt_len + 1 > base.serving.max_context)
    throw usage_error("--prompt-len " + std::to_string(o.prompt_len) +
                      " plus one generated token exceeds [model] max_context " +
                      std::to_string(base.serving.max_context) + " of " + o.base_config.string());
}

nlohmann::ordered_json config_json(const cache_bench_options& o, const std::string& model_id) {
  return {{"model", model_id},
          {"model_path", o.model.string()},
          {"base_config", o.base_config.string()},
          {"prompt_len", o.prompt_len},
          {"block_tokens", o.block_tokens},
          {"num_prompts", o.num_prompts},
          {"concurrency", o.concurrency},
          {"max_tokens", 1},
          {"rates", o.rates},
          {"paths", o.paths},
          {"seed", o.seed}};
}

// Throughput over the lowest rate's at each rate, per path; and UB's over VPC's at each rate
// when both ran.
void add_ratios(nlohmann::ordered_json& out, const cache_bench_options& o,
                const cache_bench_results& results) {
  nlohmann::ordered_json speedup;
  for (auto& [path, points] : results) {
    auto& sp = speedup[path] = nlohmann::ordered_json::array();
    const double base = points.front().throughput;
    for (auto& p : points)
      sp.push_back({{"rate", p.rate},
                    {"speedup", base > 0 ? nlohmann::ordered_json(p.throughput / base) : nullptr}});
  }
  // Throughput over the lowest rate's (the 0% point, no reuse, by default).
  out["speedup_baseline_rate"] = o.rates.front();
  out["speedup"] = speedup;
  const auto ub =
      std::find_if(results.begin(), results.end(), [](auto& r) { return r.first == "ub"; });
  const auto vpc =
      std::find_if(results.begin(), results.end(), [](auto& r) { return r.first == "vpc"; });
  if (ub == results.end() || vpc == results.end()) return;
  auto& ratio = out["ub_over_vpc"] = nlohmann::ordered_json::array();
  for (size_t k = 0; k < o.rates.size(); ++k) {
    const double v = vpc->second[k].throughput;
    ratio.push_back({{"rate", o.rates[k]},
                     {"throughput_ratio",
                      v > 0 ? nlohmann::ordered_json(ub->second[k].throughput / v) : nullptr}});
  }
}

nlohmann::ordered_json report_json(const cache_bench_options& o, const std::string& model_id,
                                   const cache_bench_results& results) {
  nlohmann::ordered_json out;
  out["config"] = config_json(o, model_id);
  nlohmann::ordered_json by_path;
  for (auto& [path, points] : results) {
    auto& list = by_path[path] = nlohmann::ordered_json::array();
    for (auto& p : points) list.push_back(point_json(p, o.prompt_len));
  }
  out["paths"] = by_path;
  add_ratios(out, o, results);
  out["paper_figure23"] = {{"ub_speedup_at_90pct_reuse", 2.28}, {"ub_over_vpc_max", 1.52}};
  return out;
}

} // namespace

int run_cache_bench(cli_args& args) {
  if (args.take_flag("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  const auto o = parse_options(args);
  const auto base_text = services::cluster::cluster_file::read(o.base_config).text();
  const int32_t token_end = token_end_of(o.model);
  check_against_base(o, base_text);
  std::fprintf(stderr, "[bench cache] model %s, base config %s\n", o.model.c_str(),
               o.base_config.c_str());

  const stop_signal_watcher signals("bench cache");
  cache_bench_results results;
  for (size_t i = 0; i < o.paths.size(); ++i)
    results.emplace_back(o.paths[i],
                         run_path(o, base_text, o.paths[i], static_cast<int>(i), token_end));

  const std::string model_id = o.model.filename().string();
  emit_report(report_json(o, model_id, results).dump(2) + "\n", o.json);
  write_text_file(o.svg, render_cache_bench_svg(o, model_id, results));
  std::fprintf(stderr, "[bench cache] plot written to %s\n", o.svg.c_str());
  bool all_ok = true;
  for (auto& [path, points] : results)
    for (auto& p : points) all_ok = all_ok && p.completed > 0;
  return all_ok ? 0 : 1;
}

} // namespace supernode::apps
