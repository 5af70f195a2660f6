#include "apps/bench/scale_bench.hpp"

#include "apps/bench/scale_bench_plot.hpp"
#include "apps/bench/scale_bench_report.hpp"
#include "apps/bench/scale_bench_run.hpp"
#include "apps/bench/stop_signals.hpp"
#include "apps/cli_args.hpp"
#include "apps/serving_setup.hpp"
#include "model/config.hpp"
#include "services/cluster/cluster_file.hpp"
#include "services/cluster/role_launch.hpp"
#include "services/planner/rate_schedule.hpp"

#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace supernode::apps {

namespace fs = std::filesystem;
namespace lg = services::loadgen;
namespace planner = services::planner;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* usage = R"(usage: supernode bench scale --config FILE [options]

Runs a request rate that changes in steps three times on a cluster of FILE brought up for
each run: with the planner on (from its smallest counts), fixed at the smallest counts
([planner] min_*) and fixed at the largest ([planner] max_*). Writes DIR/scale_bench.json and
DIR/scale_timeline.svg, and prints one line per run: SLO attainment (requests meeting both
[planner] targets), instance-seconds, failed requests, and each scale event's time from the
command to the new instance's first served sequence, or its drain time.

  --config FILE          the cluster (its [planner] table gives targets and bounds; it is
                         turned on for the planner run)
  --rate-schedule S      seconds:requests-per-second steps (default 0:1,60:6,180:1)
  --duration S           length of the load in seconds (default: the last step's start plus
                         the first step's length)
  --duration-scale X     every time of the schedule and the duration multiplied by X, for a
                         shorter run of the same shape (default 1)
  --input-len N          prompt tokens per request (default 64)
  --output-len N         max_tokens per request (default 64)
  --seed S               prompts and arrival times follow from S (default 0)
  --runs LIST            which runs, of planner,smallest,largest,scripted (default the first
                         three)
  --script S             the scripted run's operations, with the config's counts and the
                         planner off: AT:KIND=N[,KIND=N][@finish|@migrate|@switch];... (seconds
                         into the load, scaled like the schedule). It reports each operation's
                         answer, its starts' time to first served sequence, its drains' time per
                         mode, and every expert-parallel group re-formation's pause
  --model DIR            model folder (default the config's [model] path)
  --out DIR              where the JSON and SVG go (default bench-scale)
)";

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    out.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

struct scale_bench_options {
  fs::path config;
  planner::rate_schedule schedule;
  double duration_s = 0;
  int64_t input_len = 64, output_len = 64;
  uint64_t seed = 0;
  std::vector<std::string> runs;
  std::vector<scripted_scale> script;
  std::optional<std::string> model;
  fs::path out;
};

scale_bench_options parse_options(cli_args& args) {
  scale_bench_options o;
  const auto config = args.take("--config");
  if (!config) throw usage_error("bench scale needs --config FILE");
  o.config = *config;
  try {
    o.schedule = planner::rate_schedule::parse(args.take_or("--rate-schedule", "0:1,60:6,180:1"));
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  const auto& steps = o.schedule.steps();
  const double first_length = steps.size() > 1 ? steps[1].from_s : 60;
  o.duration_s = args.take_double("--duration", steps.back().from_s + first_length, 1, 86400);
  const double factor = args.take_double("--duration-scale", 1, 1e-3, 1e3);
  o.schedule = o.schedule.scaled(factor);
  o.duration_s *= factor;
  o.input_len = args.take_int("--input-len", 64, 1, 65536);
  o.output_len = args.take_int("--output-len", 64, 1, 65536);
  o.seed = static_cast<uint64_t>(args.take_int("--seed", 0, 0, INT64_MAX));
  for (const auto& run : split_commas(args.take_or("--runs", "planner,smallest,largest"))) {
    if (run != "planner" && run != "smallest" && run != "largest" && run != "scripted")
      throw usage_error("--runs: expected planner, smallest, largest or scripted, got '" + run +
                        "'");
    o.runs.push_back(run);
  }
  const auto script = args.take("--script");
  const bool scripted = std::count(o.runs.begin(), o.runs.end(), "scripted") > 0;
  if (scripted != script.has_value())
    throw usage_error(scripted ? "--runs scripted needs --script"
                               : "--script needs --runs scripted");
  try {
    if (script) o.script = parse_scale_script(*script, factor);
  } catch (const std::invalid_argument& e) {
    throw usage_error(e.what());
  }
  o.model = args.take("--model");
  o.out = args.take_or("--out", "bench-scale");
  args.expect_consumed("bench scale");
  return o;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// One run's cluster: the config with its own name, run folder and port, the planner on or
// off, and for a fixed run the counts it starts with.
scale_run_config run_config(const scale_bench_options& o, const std::string& base,
                            const std::string& run, const planner::planner_kinds& kinds,
                            const planner::planner_config& p, const fs::path& model) {
  const std::string name = "bench-scale-" + std::to_string(::getpid()) + "-" + run;
  scale_run_config c;
  c.name = run == "planner" || run == "scripted" ? run : "fixed-" + run;
  c.run_dir = fs::temp_directory_path() / ("supernode-" + name);
  c.model = model;
  c.kinds = kinds;
  const std::map<std::string, int> smallest{{kinds.prefill, p.min_prefill},
                                            {kinds.decode, p.min_decode}},
      largest{{kinds.prefill, p.max_prefill}, {kinds.decode, p.max_decode}};
  services::cluster::cluster_file f(base);
  f.own_cluster(name, c.run_dir);
  f.set("cluster", "missed_heartbeats", "20"); // two shared cores: a late heartbeat is no death
  f.set("gateway", "port", "0");
  // Every request of the load generator comes from one address: its connections are not one
  // client's abuse.
  f.set("gateway", "max_connections_per_client", "4096");
  f.set("planner", "enabled", run == "planner" ? "true" : "false");
  if (run == "planner") c.start_counts = smallest;
  if (run == "scripted") c.script = o.script; // from the config's counts
  for (const auto& [kind, count] : run == "largest" ? largest : smallest)
    if (run == "smallest" || run == "largest")
      f.set("process." + kind, "count", std::to_string(count));
  c.config_text = f.text();
  c.duration_s = o.duration_s;
  return c;
}

std::string seconds_text(const json& v) {
  if (v.is_null()) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", v.get<double>());
  return text;
}

void print_summary(const json& run) {
  std::printf("%-15s SLO attainment %5.1f %%  instance-seconds %7.1f  requests %zu  failed %lld\n",
              run["name"].get<std::string>().c_str(), 100 * run["slo_attainment"].get<double>(),
              run["instance_seconds"].get<double>(), run["requests"].get<size_t>(),
              static_cast<long long>(run["failed"].get<int64_t>()));
  for (const auto& e : run["events"]) {
    const auto kind = e["kind"].get<std::string>();
    const bool start = kind == "start", drain = kind == "drain";
    std::printf("  %-6s %-12s at %6.1f s: %s %s\n", kind.c_str(),
                e["slot"].get<std::string>().c_str(), e["command_s"].get<double>(),
                start   ? "to first served"
                : drain ? "drained in"
                        : ("to " + e.value("to", std::string()) + ", serving in").c_str(),
                seconds_text(start   ? e["to_first_served_s"]
                             : drain ? e["drain_s"]
                                     : e["to_ready_s"])
                    .c_str());
  }
  for (const auto& step : run["script"])
    std::printf("  step  %-30s at %6.1f s: %s in %s\n", step["step"].get<std::string>().c_str(),
                step["sent_s"].get<double>(), step["ok"].get<bool>() ? "done" : "REFUSED",
                seconds_text(step["took_s"]).c_str());
  for (const auto& r : run["ep_reforms"])
    std::printf("  group %-12s at %6.1f s: re-formed over %s, paused %lld ms (ranks %lld ms "
                "apart, longest rank pause %lld ms)\n",
                r["group"].get<std::string>().c_str(), r["at_s"].get<double>(),
                r["over"].get<std::string>().c_str(), r["pause_ms"].get<long long>(),
                r["switch_spread_ms"].get<long long>(),
                r["longest_rank_pause_ms"].get<long long>());
}

} // namespace

int run_scale_bench(cli_args& args) {
  if (args.take_flag("--help")) {
    std::printf("%s", usage);
    return 0;
  }
  const auto o = parse_options(args);
  // Before any thread (they inherit the blocked signals): ^C or a kill takes the run's cluster
  // down (cache_bench_cluster registers its `cluster down`) before the bench ends.
  const stop_signal_watcher signals("bench scale");
  const std::string base = services::cluster::read_text_file(o.config);
  // The planner's view of the config (on, whatever the file says), checked before any run.
  // A scripted run alone keeps the planner off: its checks do not apply.
  const bool scripted_only = o.runs == std::vector<std::string>{"scripted"};
  auto on = scripted_only
                ? base
                : services::cluster::cluster_file(base).set("planner", "enabled", "true").text();
  const auto setup = parse_serving_setup(on, o.config.string(), o.model);
  const auto& p = setup.serving.planner;
  auto kinds = planner::planner_process_kinds(setup.cluster, p);
  // A scripted run alone needs no plannable topology: only which kinds serve which role.
  if (kinds.problem && scripted_only) {
    kinds.problem.reset();
    for (const auto& proc : setup.cluster.processes)
      for (const auto& role : proc.roles) {
        if (role == "prefill" && kinds.kinds.prefill.empty()) kinds.kinds.prefill = proc.name;
        if (role == "decode" && kinds.kinds.decode.empty()) kinds.kinds.decode = proc.name;
      }
  }
  if (kinds.problem)
    throw usage_error(o.config.string() + ": [" + transport::table_name(kinds.problem->table) +
                      "] " + kinds.problem->key + " " + kinds.problem->what);
  const fs::path model = fs::absolute(setup.serving.model_path);

  lg::workload_spec w;
  const auto arrivals = o.schedule.arrivals(o.duration_s, o.seed);
  w.num_prompts = static_cast<int64_t>(arrivals.size());
  w.input = {lg::length_distribution::kind::fixed, static_cast<double>(o.input_len), 0};
  w.output = {lg::length_distribution::kind::fixed, static_cast<double>(o.output_len), 0};
  w.vocab = model::model_config::load(model / "config.json").vocab_size;
  w.seed = o.seed;
  auto plan = lg::make_workload(w);
  for (size_t i = 0; i < plan.size(); ++i) plan[i].arrival_s = arrivals[i];
  std::fprintf(stderr, "[bench scale] %zu requests over %.0f s, three runs of %s\n", plan.size(),
               o.duration_s, o.config.c_str());

  const lg::slo_targets slo{static_cast<double>(p.ttft_ms), static_cast<double>(p.tpot_ms), {}};
  const double bin_s = std::max(1.0, o.duration_s / 40);
  std::vector<scale_run_result> results;
  json out;
  out["config"] = o.config.string();
  out["cpu"] = cpu_model();
  out["rate_schedule"] = json::array();
  for (const auto& s : o.schedule.steps()) out["rate_schedule"].push_back({s.from_s, s.rate});
  out["duration_s"] = o.duration_s;
  out["input_len"] = o.input_len;
  out["output_len"] = o.output_len;
  out["targets"] = {{"ttft_ms", p.ttft_ms}, {"tpot_ms", p.tpot_ms}};
  out["runs"] = json::array();
  for (const auto& run : o.runs) {
    results.push_back(run_scale_once(run_config(o, base, run, kinds.kinds, p, model), plan));
    out["runs"].push_back(summarize_run(results.back(), slo, bin_s));
    print_summary(out["runs"].back());
  }
  fs::create_directories(o.out);
  std::ofstream(o.out / "scale_bench.json") << out.dump(2) << "\n";
  std::ofstream(o.out / "scale_timeline.svg")
      << render_scale_timeline_svg(results, slo, bin_s,
                                   "bench scale: " + o.config.filename().string() + ", " +
                                       std::to_string(plan.size()) + " requests");
  std::fprintf(stderr, "[bench scale] wrote %s and %s\n", (o.out / "scale_bench.json").c_str(),
               (o.out / "scale_timeline.svg").c_str());
  return 0;
}

} // namespace supernode::apps
