// `supernode chaos`: a fault-injection run. The reference engine generates every prompt of the
// workload first, the cluster comes up, a bench-serve load runs while the plan's faults fire,
// the cluster goes down (always), and the report compares every request's tokens with the
// reference's (services/chaos/chaos_report.hpp defines the counts).

#include "apps/bench/bench_report.hpp"
#include "apps/bench/engine_baseline.hpp"
#include "apps/bench/stop_signals.hpp"
#include "apps/chaos_driver.hpp"
#include "apps/cluster_runner.hpp"
#include "apps/commands.hpp"
#include "apps/serving_setup.hpp"
#include "model/engine.hpp"
#include "services/chaos/chaos_report.hpp"
#include "services/chaos/chaos_timeline.hpp"
#include "services/chaos/fault_plan.hpp"
#include "services/chaos/fault_timing.hpp"
#include "services/cluster/role_launch.hpp"
#include "services/loadgen/http_client.hpp"
#include "services/loadgen/load_runner.hpp"
#include "services/loadgen/workload.hpp"
#include "transport/fault_injection.hpp"
#include "transport/private_files.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace supernode::apps {

namespace {

namespace fs = std::filesystem;
namespace chaos = services::chaos;
namespace lg = services::loadgen;

constexpr const char* usage = R"(usage: supernode chaos --config FILE --faults PLAN.toml [options]

A fault-injection run: computes the reference engine's greedy tokens for every prompt of the
workload, brings the cluster up (cluster up), runs a bench-serve load against its gateways while
the plan's faults fire at their times, brings the cluster down, and reports what was lost,
wrong or repeated. Plans: configs/faults/*.toml (the format is in services/chaos/fault_plan.hpp).

  --config FILE          the cluster (its gateway needs a fixed port for a gateway fault)
  --faults PLAN.toml     the faults
  --model DIR            the model, as for cluster up (default: the config's)
  --num-prompts N        requests (default 64)
  --concurrency C        at most C in flight (default 8)
  --input-len SPEC       prompt lengths: N, uniform:MIN:MAX or normal:MEAN:SD (default 48)
  --max-tokens M         tokens each request generates (ignore_eos; default 32)
  --request-rate R       Poisson arrivals at R requests/s (default: as fast as C allows)
  --seed S               prompts and a role's pick follow from S (default 0)
  --retry N              resubmit a request that failed on a connection error up to N times,
                         to the next gateway (default 0)
  --timeout-s T          per-request deadline (default 120)
  --recovery-wait-s T    after the load, wait up to T s for every instance to be alive again
                         so recovery times are measured (default 30)
  --attach               the cluster already runs (a compose cluster's chaos service): neither
                         bring it up nor down, find its gateways from the config and its
                         processes in /proc (kill and stop faults only: plane and storage
                         faults reach processes through their environment when they start)
  --dry-run              print each fault with its resolved target and start nothing
  --json                 print the report as one JSON object
  --report FILE          also write the JSON report to FILE
  --svg FILE             write the timeline (throughput and TTFT over time, faults marked)

Exit status 0 when no request failed, mismatched or got a token twice; 1 otherwise; 2 on bad
options or a plan the runner cannot carry out.
)";

struct chaos_options {
  std::string config, faults;
  std::optional<std::string> model;
  lg::workload_spec workload;
  int64_t concurrency = 8, retries = 0;
  double timeout_s = 120, recovery_wait_s = 30;
  bool json = false, dry_run = false, attach = false;
  std::optional<std::string> svg, report;
};

chaos_options parse_options(cli_args& args) {
  chaos_options o;
  auto config = args.take("--config"), faults = args.take("--faults");
  if (!config || !faults) throw usage_error("chaos needs --config FILE and --faults PLAN.toml");
  o.config = *config;
  o.faults = *faults;
  o.model = args.take("--model");
  auto& w = o.workload;
  w.num_prompts = args.take_int("--num-prompts", 64, 1, 1'000'000);
  try {
    w.input = lg::parse_length_distribution(args.take_or("--input-len", "48"));
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("--input-len: ") + e.what());
  }
  const auto max_tokens = args.take_int("--max-tokens", 32, 1, 1'000'000);
  w.output = {lg::length_distribution::kind::fixed, static_cast<double>(max_tokens), 0};
  w.request_rate = args.take_double("--request-rate", std::numeric_limits<double>::infinity(), 1e-9,
                                    std::numeric_limits<double>::infinity());
  w.seed =
      static_cast<uint64_t>(args.take_int("--seed", 0, 0, std::numeric_limits<int64_t>::max()));
  o.concurrency = args.take_int("--concurrency", 8, 1, 1'000'000);
  o.retries = args.take_int("--retry", 0, 0, 1000);
  o.timeout_s = args.take_double("--timeout-s", 120, 1e-3, 1e9);
  o.recovery_wait_s = args.take_double("--recovery-wait-s", 30, 0, 1e6);
  o.json = args.take_flag("--json");
  o.dry_run = args.take_flag("--dry-run");
  o.attach = args.take_flag("--attach");
  o.svg = args.take("--svg");
  o.report = args.take("--report");
  args.expect_consumed("chaos");
  return o;
}

// The reference engine's tokens for every request: what an uninterrupted run gives.
std::vector<std::vector<int32_t>>
reference_tokens(std::shared_ptr<const model::model_weights> weights,
                 const std::vector<lg::planned_request>& plan, int64_t batch) {
  int64_t context = 0;
  for (const auto& r : plan)
    context = std::max<int64_t>(context, static_cast<int64_t>(r.prompt.size()) + r.max_tokens);
  model::engine_options eo;
  eo.max_context = context;
  eo.kv_blocks = batch * (context / eo.block_size + 1);
  model::reference_engine engine(std::move(weights), eo);
  std::vector<std::vector<int32_t>> out;
  for (size_t first = 0; first < plan.size(); first += static_cast<size_t>(batch)) {
    for (auto& res :
         engine.generate_batch(engine_requests(plan, first, static_cast<size_t>(batch))))
      out.push_back(std::move(res.tokens));
  }
  return out;
}

// The faults with their targets resolved; throws usage_error for what the runner cannot do.
std::vector<chaos::fired_fault> resolve_plan(const chaos::fault_plan& plan,
                                             const transport::cluster_config& cluster,
                                             uint64_t seed) {
  std::vector<chaos::fired_fault> out;
  for (const auto& f : plan.faults) {
    try {
      out.push_back({f, chaos::resolve_target(f, cluster, seed), false, 0, {}});
    } catch (const std::runtime_error& e) {
      throw usage_error(e.what());
    }
  }
  return out;
}

// The plane and storage faults, as the processes read them (SUPERNODE_FAULT_PLAN); false when
// there are none.
bool write_plane_plan(const std::vector<chaos::fired_fault>& faults, uint64_t seed,
                      const fs::path& file) {
  transport::plane_fault_plan plan;
  plan.seed = seed;
  for (const auto& f : faults) {
    const std::string slot = f.target ? f.target->slot : "";
    if (auto storage = transport::storage_fault_kind_named(chaos::to_string(f.spec.kind))) {
      plan.storage.push_back({*storage, slot, f.spec.at_s, f.spec.duration_s, f.spec.delay_ms});
      continue;
    }
    if (!chaos::is_plane_fault(f.spec.kind)) continue;
    transport::plane_fault p;
    p.kind = *transport::plane_fault_kind_named(chaos::to_string(f.spec.kind));
    p.flow = f.spec.flow;
    p.process = slot;
    p.at_s = f.spec.at_s;
    p.duration_s = f.spec.duration_s;
    p.rate = f.spec.rate;
    p.delay_ms = f.spec.delay_ms;
    plan.faults.push_back(std::move(p));
  }
  if (plan.faults.empty() && plan.storage.empty()) return false;
  transport::write_private_file(file, transport::plane_fault_plan_text(plan));
  return true;
}

// "listening gateway-N HOST:PORT" lines the gateways printed into their logs, in slot order.
std::vector<lg::http_url> gateway_urls(const serving_setup& setup) {
  std::vector<lg::http_url> urls;
  for (const auto& p : setup.cluster.processes)
    for (int i = 0; i < p.count; ++i) {
      const auto log = setup.cluster.run_dir / "logs" / (p.name + "-" + std::to_string(i) + ".log");
      for (const auto& line : services::cluster::lines_starting(
               services::cluster::read_text_file(log), "listening gateway-")) {
        const auto space = line.rfind(' ');
        urls.push_back(lg::parse_http_url(line.substr(space + 1))); // "http://HOST:PORT"
      }
    }
  if (urls.empty()) throw std::runtime_error("no gateway printed a \"listening gateway-\" line");
  return urls;
}

// A running cluster's gateways, from its config: gateway N listens on [gateway] port + N.
std::vector<lg::http_url> configured_gateway_urls(const serving_setup& setup) {
  if (setup.serving.http_port == 0)
    throw usage_error("--attach needs the gateways' ports: [gateway] port is 0 (any free port)");
  std::vector<lg::http_url> urls;
  for (const auto& i : setup.cluster.instances()) {
    if (i.role != "gateway") continue;
    lg::http_url url;
    url.host = setup.serving.http_host == "0.0.0.0" ? "127.0.0.1" : setup.serving.http_host;
    url.port = std::to_string(setup.serving.http_port + static_cast<int>(urls.size()));
    urls.push_back(url);
  }
  if (urls.empty()) throw usage_error(setup.source + " has no gateway to send the load to");
  return urls;
}

// With --attach the processes started without the plan, so only signals reach them.
void require_process_faults(const std::vector<chaos::fired_fault>& faults) {
  for (const auto& f : faults)
    if (!chaos::is_process_fault(f.spec.kind))
      throw usage_error("fault " + std::to_string(f.spec.index) + " (" +
                        chaos::to_string(f.spec.kind) +
                        "): with --attach only kill and stop faults fire; plane and storage "
                        "faults reach the processes through their environment when they start");
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// While it lives, what this process prints on stdout goes to stderr: cluster up and down report
// there, and stdout is the report's alone.
class stdout_to_stderr {
public:
  stdout_to_stderr() : saved_(::dup(STDOUT_FILENO)) {
    std::fflush(stdout);
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  ~stdout_to_stderr() {
    std::fflush(stdout);
    ::dup2(saved_, STDOUT_FILENO);
    ::close(saved_);
  }
  stdout_to_stderr(const stdout_to_stderr&) = delete;
  stdout_to_stderr& operator=(const stdout_to_stderr&) = delete;

private:
  int saved_;
};

// Brings the cluster down when the run leaves, however it leaves.
struct cluster_guard {
  const serving_setup& setup;
  ~cluster_guard() { cluster_down(setup, std::chrono::seconds(10)); }
};

struct run_record {
  lg::run_result load;
  std::vector<chaos::fired_fault> faults;
  std::vector<chaos::liveness_sample> samples;
  std::string gateway_metrics; // at the end
  double origin_unix = 0;
};

run_record run_under_faults(const serving_setup& setup, const chaos_options& o,
                            const std::vector<lg::planned_request>& plan,
                            std::vector<chaos::fired_fault> faults, const fs::path& plane_plan) {
  const auto urls = o.attach ? configured_gateway_urls(setup) : gateway_urls(setup);
  const auto model = lg::fetch_served_model(urls[0], 30).id;
  chaos_driver driver(std::move(faults),
                      o.attach ? pids_from_proc() : pids_from_files(setup.cluster.run_dir / "pids"),
                      urls);
  run_record out;
  lg::run_options ro;
  ro.url = urls[0];
  ro.more_urls.assign(urls.begin() + 1, urls.end());
  ro.retries = o.retries;
  ro.return_token_ids = true;
  ro.model = model;
  ro.max_concurrency = o.concurrency;
  ro.timeout_s = o.timeout_s;
  ro.on_start = [&](std::chrono::steady_clock::time_point origin) {
    // The wall-clock time of the load's own origin, so the processes' event stamps and the
    // driver's share one zero (origin was taken before this call).
    out.origin_unix =
        unix_now() -
        std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
    // The processes' plane faults count from here too.
    if (!plane_plan.empty())
      transport::write_private_file(plane_plan.string() + ".epoch",
                                    std::to_string(out.origin_unix) + "\n");
    driver.start(origin);
  };
  out.load = lg::run_load(plan, ro);
  driver.finish(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(o.recovery_wait_s)));
  out.faults = driver.faults();
  out.samples = driver.samples();
  out.gateway_metrics = driver.last_metrics();
  return out;
}

std::string subtitle(const chaos_options& o, const serving_setup& setup,
                     const chaos::chaos_report& r) {
  return setup.cluster.name + " (" + o.config + ") | faults " + o.faults + " | " +
         std::to_string(o.workload.num_prompts) + " prompts, concurrency " +
         std::to_string(o.concurrency) + "\n" + std::to_string(r.succeeded) + " ok, " +
         std::to_string(r.failed) + " failed, " + std::to_string(r.mismatched) + " mismatched, " +
         std::to_string(r.duplicated_tokens) + " duplicated tokens";
}

} // namespace

int cmd_chaos(cli_args& args) {
  if (args.take_flag("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  const auto o = parse_options(args);
  // Before any thread starts: ^C brings the cluster down instead of leaving it running.
  stop_signal_watcher signals("chaos");
  const auto setup = load_serving_setup(o.config, o.model, /*model_required=*/!o.dry_run);
  chaos::fault_plan plan;
  try {
    plan = chaos::load_fault_plan(o.faults);
  } catch (const std::runtime_error& e) {
    throw usage_error(e.what());
  }
  auto faults = resolve_plan(plan, setup.cluster, o.workload.seed);
  if (o.attach) require_process_faults(faults);
  if (o.dry_run) {
    for (const auto& f : faults)
      std::printf("fault %zu: %s at %g s on %s\n", f.spec.index, chaos::to_string(f.spec.kind),
                  f.spec.at_s,
                  f.target ? (f.target->named + " (process " + f.target->slot + ")").c_str()
                           : "every process");
    return 0;
  }

  model::load_options lo;
  lo.prec = setup.serving.precision;
  lo.load_mtp = false;
  const auto weights = model::model_weights::load(setup.serving.model_path, lo);
  auto spec = o.workload;
  spec.vocab = weights->config.vocab_size;
  const auto workload = lg::make_workload(spec);
  std::fprintf(stderr, "[chaos] reference tokens for %zu prompts...\n", workload.size());
  const auto reference = reference_tokens(weights, workload, o.concurrency);

  // Plane faults reach the processes through their environment, restarted ones included.
  const auto plane_plan = setup.cluster.run_dir / "chaos-plane-faults.toml";
  fs::remove(plane_plan.string() + ".epoch");
  const bool plane_faults = write_plane_plan(faults, o.workload.seed, plane_plan);
  if (plane_faults)
    ::setenv(transport::fault_plan_env, plane_plan.c_str(), 1);
  else
    ::unsetenv(transport::fault_plan_env);

  run_record run;
  if (o.attach) {
    const stdout_to_stderr report_only_on_stdout;
    run = run_under_faults(setup, o, workload, std::move(faults), fs::path());
  } else {
    const stdout_to_stderr report_only_on_stdout;
    on_stop_signal down_on_stop([&] { cluster_down(setup, std::chrono::seconds(10)); });
    // Owned by this run: killed outright (no signal to catch), it still takes the cluster down.
    if (cluster_up(setup, o.config, ::getpid()) != 0) return 1;
    cluster_guard down{setup};
    run = run_under_faults(setup, o, workload, std::move(faults),
                           plane_faults ? plane_plan : fs::path());
  }

  std::string events_text;
  const auto events_file = setup.cluster.run_dir / "events.jsonl";
  if (fs::exists(events_file)) events_text = services::cluster::read_text_file(events_file);
  const auto events = chaos::parse_process_events(events_text, run.origin_unix);
  std::vector<chaos::fault_record> records;
  for (const auto& f : run.faults) records.push_back(chaos::time_fault(f, events, run.samples));
  auto report = chaos::make_chaos_report(run.load.outcomes, reference, records);
  report.resumes = chaos::resume_stats_of(lg::metrics_snapshot(run.gateway_metrics));

  auto j = chaos::to_json(report);
  j["duration_s"] = run.load.duration_s;
  j["events_log"] = fs::exists(events_file);
  if (o.json)
    emit_report(j.dump(2) + "\n", o.report);
  else
    std::fputs(chaos::to_text(report).c_str(), stdout);
  if (o.report && !o.json) write_text_file(*o.report, j.dump(2) + "\n");
  if (o.svg)
    write_text_file(*o.svg, chaos::render_timeline_svg(run.load.outcomes, report.faults,
                                                       "supernode chaos: " + o.faults,
                                                       subtitle(o, setup, report)));
  return report.clean() ? 0 : 1;
}

} // namespace supernode::apps
