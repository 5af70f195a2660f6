#include "apps/bench/serve_bench.hpp"

#include "apps/bench/bench_report.hpp"
#include "apps/bench/engine_baseline.hpp"
#include "apps/cli_args.hpp"
#include "services/loadgen/http_client.hpp"
#include "services/loadgen/latency_plot.hpp"
#include "services/loadgen/load_runner.hpp"
#include "services/loadgen/report.hpp"
#include "services/loadgen/workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <sys/resource.h>
#include <unistd.h>

namespace supernode::apps {

namespace lg = services::loadgen;

namespace {

constexpr const char* usage = R"(usage: supernode bench serve [options]

Streams greedy, ignore_eos completions of random token-id prompts to an OpenAI-compatible
server (POST /v1/completions) and reports TTFT, TPOT, ITL, E2E latency and throughput as JSON
on stdout.

  --url URL              server (default http://127.0.0.1:8000); give it more than once for
                         --retry to fail over to (the first one gets every first attempt)
  --retry N              resubmit a request that failed on a connection error (refused,
                         reset, the connection broken mid-stream; not an HTTP error, an
                         error event or the deadline) up to N times, each time to the next
                         --url (wrapping around); the request starts over and its TTFT and
                         E2E count from the first attempt (default 0)
  --model ID             model to request (default: the first one GET /v1/models lists)
  --num-prompts N        requests to send (default 100)
  --input-len SPEC       prompt length in tokens: N, uniform:MIN:MAX or normal:MEAN:SD
                         (normal is rounded and clipped to >= 1; default 128)
  --output-len SPEC      max_tokens per request, same forms (default 128)
  --shared-prefix R      the first round(R * len) tokens of every prompt are one common
                         prefix, for context-cache reuse; R in [0, 1] (default 0)
  --vocab V              vocabulary size; token ids are drawn from [100, min(V, 128000))
                         (default 129280, DeepSeek-V3)
  --seed S               prompts, lengths and arrival times all follow from S (default 0)
  --concurrency C        at most C requests in flight (default: no cap)
  --request-rate R       Poisson arrivals at R requests/s (default inf: all due at once).
                         Both given: arrivals at rate R, each waiting for one of C slots.
                         Neither given: every request is sent at once.
  --timeout-s T          per-request deadline, connect to [DONE] (default 600)
  --slo-ttft-ms X        goodput counts requests with TTFT <= X ...
  --slo-tpot-ms X        ... and TPOT <= X ...
  --slo-e2e-ms X         ... and E2E <= X (only the SLOs given; none: goodput is null)
  --out FILE.json        also write the report to FILE.json, and the plot next to it
                         (FILE.svg)
  --svg FILE.svg         write the latency plot (CDFs of TTFT, TPOT, ITL, E2E with
                         p50/p90/p99) to FILE.svg
  --compare-engine DIR   after the run, generate the same requests in this process with the
                         reference engine on model DIR (the model the server serves), in
                         batches of --concurrency, and report both throughputs and what the
                         server costs ("serving_overhead": 1 - server / engine)
  --progress             progress line on stderr even when stderr is not a terminal
                         (it is shown on a terminal anyway; stdout only ever gets the JSON)

Exit status 0 when at least one request completed, 1 when every request failed, 2 on bad
options.
)";

lg::length_distribution take_length(cli_args& args, const std::string& name,
                                    const std::string& fallback) {
  const auto spec = args.take_or(name, fallback);
  try {
    return lg::parse_length_distribution(spec);
  } catch (const std::invalid_argument& e) {
    throw usage_error(name + ": " + e.what());
  }
}

std::optional<double> take_optional_double(cli_args& args, const std::string& name) {
  const double v = args.take_double(name, std::nan(""), 0, std::numeric_limits<double>::max());
  return std::isnan(v) ? std::nullopt : std::optional<double>(v);
}

struct serve_bench_options {
  lg::http_url url;
  std::string url_text;
  std::vector<lg::http_url> more_urls;
  int64_t retries = 0;
  std::optional<std::string> model;
  lg::workload_spec workload;
  int64_t concurrency = 0;
  double timeout_s = 600;
  lg::slo_targets slo;
  std::optional<std::string> out_json, out_svg;
  bool progress = false;
  std::optional<std::string> compare_engine;
};

serve_bench_options parse_options(cli_args& args) {
  serve_bench_options o;
  o.url_text = args.take_or("--url", "http://127.0.0.1:8000");
  try {
    o.url = lg::parse_http_url(o.url_text);
    while (auto more = args.take("--url")) {
      o.more_urls.push_back(lg::parse_http_url(*more));
      o.url_text += " " + *more;
    }
  } catch (const std::invalid_argument& e) {
    throw usage_error(std::string("--url: ") + e.what());
  }
  o.retries = args.take_int("--retry", 0, 0, 1000);
  o.model = args.take("--model");
  auto& w = o.workload;
  w.num_prompts = args.take_int("--num-prompts", 100, 1, 10'000'000);
  w.input = take_length(args, "--input-len", "128");
  w.output = take_length(args, "--output-len", "128");
  w.shared_prefix_ratio = args.take_double("--shared-prefix", 0, 0, 1);
  w.vocab = args.take_int("--vocab", 129280, lg::first_random_token + 1,
                          std::numeric_limits<int32_t>::max());
  w.seed =
      static_cast<uint64_t>(args.take_int("--seed", 0, 0, std::numeric_limits<int64_t>::max()));
  w.request_rate = args.take_double("--request-rate", std::numeric_limits<double>::infinity(), 1e-9,
                                    std::numeric_limits<double>::infinity());
  o.concurrency = args.take_int("--concurrency", 0, 1, 1'000'000);
  o.timeout_s = args.take_double("--timeout-s", 600, 1e-3, 1e9);
  o.slo.ttft_ms = take_optional_double(args, "--slo-ttft-ms");
  o.slo.tpot_ms = take_optional_double(args, "--slo-tpot-ms");
  o.slo.e2e_ms = take_optional_double(args, "--slo-e2e-ms");
  o.out_json = args.take("--out");
  o.out_svg = args.take("--svg");
  if (o.out_json && !o.out_svg)
    o.out_svg = std::filesystem::path(*o.out_json).replace_extension(".svg").string();
  o.progress = args.take_flag("--progress") || isatty(STDERR_FILENO);
  o.compare_engine = args.take("--compare-engine");
  args.expect_consumed("bench serve");
  return o;
}

nlohmann::ordered_json config_json(const serve_bench_options& o, const std::string& model) {
  const auto& w = o.workload;
  auto or_null = [](const std::optional<double>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  return {
      {"url", o.url_text},
      {"model", model},
      {"num_prompts", w.num_prompts},
      {"input_len", lg::to_string(w.input)},
      {"output_len", lg::to_string(w.output)},
      {"shared_prefix_ratio", w.shared_prefix_ratio},
      {"vocab", w.vocab},
      {"seed", w.seed},
      {"request_rate",
       std::isfinite(w.request_rate) ? nlohmann::json(w.request_rate) : nlohmann::json(nullptr)},
      {"concurrency", o.concurrency > 0 ? nlohmann::json(o.concurrency) : nlohmann::json(nullptr)},
      {"timeout_s", o.timeout_s},
      {"retry", o.retries},
      {"slo",
       {{"ttft_ms", or_null(o.slo.ttft_ms)},
        {"tpot_ms", or_null(o.slo.tpot_ms)},
        {"e2e_ms", or_null(o.slo.e2e_ms)}}},
  };
}

std::string plot_subtitle(const serve_bench_options& o, const std::string& model,
                          const lg::bench_report& r) {
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  const auto& w = o.workload;
  return model + " at " + o.url_text + " | " + std::to_string(w.num_prompts) + " prompts, in " +
         lg::to_string(w.input) + ", out " + lg::to_string(w.output) + ", shared prefix " +
         num(w.shared_prefix_ratio) + " | concurrency " +
         (o.concurrency > 0 ? std::to_string(o.concurrency) : "unlimited") + ", rate " +
         (std::isfinite(w.request_rate) ? num(w.request_rate) + "/s" : "inf") + "\n" +
         std::to_string(r.completed) + " ok, " + std::to_string(r.failed) + " failed, " +
         num(std::round(r.output_throughput)) + " output tok/s";
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// One line rewritten in place on a terminal; a plain line per tick otherwise (--progress into
// a log file should not become one enormous line).
void print_progress(const lg::run_progress& p, bool terminal) {
  const double rate = p.elapsed_s > 0 ? static_cast<double>(p.output_tokens) / p.elapsed_s : 0;
  std::fprintf(stderr,
               "%s[bench serve] %lld/%lld done, %lld in flight, %lld failed, %.1f s, %.0f tok/s%s",
               terminal ? "\r" : "", static_cast<long long>(p.done),
               static_cast<long long>(p.total), static_cast<long long>(p.in_flight),
               static_cast<long long>(p.failed), p.elapsed_s, rate, terminal ? "\x1b[K" : "\n");
  if (terminal && p.done == p.total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

} // namespace

int run_serve_bench(cli_args& args) {
  if (args.take_flag("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  const auto o = parse_options(args);

  std::string model;
  int64_t max_model_len = 0;
  if (o.model) {
    model = *o.model;
  } else {
    const auto served = lg::fetch_served_model(o.url, std::min(o.timeout_s, 30.0));
    model = served.id;
    max_model_len = served.max_model_len;
  }

  const auto plan = lg::make_workload(o.workload);
  if (max_model_len > 0) {
    int64_t too_long = 0;
    for (const auto& r : plan)
      if (static_cast<int64_t>(r.prompt.size()) + r.max_tokens > max_model_len) ++too_long;
    if (too_long > 0)
      std::fprintf(stderr,
                   "[bench serve] warning: %lld requests exceed max_model_len %lld and will "
                   "likely be rejected\n",
                   static_cast<long long>(too_long), static_cast<long long>(max_model_len));
  }

  lg::run_options ro;
  ro.url = o.url;
  ro.more_urls = o.more_urls;
  ro.retries = o.retries;
  ro.model = model;
  ro.max_concurrency = o.concurrency;
  ro.timeout_s = o.timeout_s;
  if (o.progress) {
    const bool terminal = isatty(STDERR_FILENO);
    ro.on_progress = [terminal](const lg::run_progress& p) { print_progress(p, terminal); };
    if (!terminal) ro.progress_interval_s = 5;
  }
  const double cpu_before = process_cpu_seconds();
  const auto result = lg::run_load(plan, ro);
  const double client_cpu = process_cpu_seconds() - cpu_before;
  const auto report = lg::make_report(result.outcomes, result.duration_s, o.slo);

  nlohmann::ordered_json out;
  out["config"] = config_json(o, model);
  out.update(lg::to_json(report));
  // The load generator shares the machine with the server: what it spent, to read throughput by.
  out["client_cpu_s"] = client_cpu;
  // Requests resubmitted after a connection error (--retry).
  out["retried"] = std::count_if(result.outcomes.begin(), result.outcomes.end(),
                                 [](const lg::request_outcome& r) { return r.retries > 0; });
  if (o.compare_engine) {
    // The server is idle by now, so the engine has the cores the server had.
    auto engine = run_engine_baseline(*o.compare_engine, plan, o.concurrency);
    const double served = report.output_throughput;
    const double raw = engine["output_throughput"].get<double>();
    out["engine"] = engine;
    out["serving_overhead"] = raw > 0 ? 1.0 - served / raw : 0.0;
  }
  emit_report(out.dump(2) + "\n", o.out_json);
  if (o.out_svg)
    write_text_file(*o.out_svg,
                    lg::render_latency_svg(lg::collect_latencies(result.outcomes),
                                           "supernode bench serve: latency distributions",
                                           plot_subtitle(o, model, report)));
  return report.completed > 0 ? 0 : 1;
}

} // namespace supernode::apps
