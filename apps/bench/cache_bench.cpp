#include "apps/bench/cache_bench.hpp"

#include "apps/cli_args.hpp"
#include "apps/commands.hpp"
#include "apps/serving_setup.hpp"
#include "services/loadgen/http_client.hpp"
#include "services/loadgen/latency_plot.hpp"
#include "services/loadgen/load_runner.hpp"
#include "services/loadgen/report.hpp"
#include "services/loadgen/workload.hpp"
#include "transport/free_ports.hpp"
#include "transport/toml_edit.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace supernode::apps {

namespace lg = services::loadgen;
namespace fs = std::filesystem;

namespace {

using clock_type = std::chrono::steady_clock;

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

struct cache_bench_options {
  fs::path model;
  fs::path base_config;
  std::vector<std::string> paths;
  std::vector<double> rates;
  int64_t prompt_len = 1024;
  int64_t num_prompts = 16;
  int64_t concurrency = 4;
  int64_t block_tokens = 128;
  uint64_t seed = 0;
  double timeout_s = 600;
  std::string svg = "cache_bench.svg";
  std::optional<std::string> json;
  bool quick = false;
};

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

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

using transport::set_toml_key;

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump();
}

// ---- Running this binary as a child (`cluster up`, `cluster down`) ----

// Runs `supernode ARGS...` (this binary); each line it prints on stdout goes to on_line, its
// stderr is ours. Returns its exit status (128 + signal when killed).
int run_self(const std::vector<std::string>& args,
             const std::function<void(const std::string&)>& on_line) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> argv_s{"supernode"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error("fork failed");
  }
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::execv("/proc/self/exe", argv.data());
    std::perror("supernode bench cache: exec failed");
    ::_exit(127);
  }
  ::close(fds[1]);
  FILE* out = ::fdopen(fds[0], "r");
  char* line = nullptr;
  size_t cap = 0;
  for (ssize_t n; (n = ::getline(&line, &cap, out)) >= 0;) {
    std::string text(line, static_cast<size_t>(n));
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    on_line(text);
  }
  std::free(line);
  std::fclose(out);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ^C or a kill while a cluster is up runs `cluster down` for it before dying, so no cluster
// outlives the benchmark. Only async-signal-safe calls in the handler: the argv is built before.
char** volatile g_down_argv = nullptr;

void stop_cluster_and_die(int sig) {
  if (char** argv = g_down_argv) {
    const pid_t pid = ::_Fork(); // fork() may deadlock in a handler (malloc's at-fork locks)
    if (pid == 0) {
      ::dup2(STDERR_FILENO, STDOUT_FILENO);
      ::execv("/proc/self/exe", argv);
      ::_exit(127);
    }
    if (pid > 0) ::waitpid(pid, nullptr, 0);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// One cluster of the sweep: its config written to a fresh run folder, brought up with
// `supernode cluster up` and always taken down (destructor, or the signal handler).
class bench_cluster {
public:
  bench_cluster(const fs::path& run_dir, const std::string& config_text, const fs::path& model)
      : run_dir_(run_dir), model_(model) {
    fs::remove_all(run_dir_);
    fs::create_directories(run_dir_);
    config_ = run_dir_ / "cluster.toml";
    write_text(config_, config_text);
    down_args_ = {"supernode", "cluster", "down", "--config", config_.string()};
    for (auto& a : down_args_) down_argv_.push_back(a.data());
    down_argv_.push_back(nullptr);
  }
  bench_cluster(const bench_cluster&) = delete;
  bench_cluster& operator=(const bench_cluster&) = delete;
  ~bench_cluster() {
    if (!started_) return;
    try {
      run_self({"cluster", "down", "--config", config_.string()}, [](const std::string& line) {
        std::fprintf(stderr, "[bench cache] %s\n", line.c_str());
      });
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[bench cache] cluster down --config %s failed: %s\n", config_.c_str(),
                   e.what());
    }
    g_down_argv = nullptr;
    std::error_code ec;
    if (ok_) {
      fs::remove_all(run_dir_, ec);
    } else {
      fs::remove_all(run_dir_ / "ems", ec); // the SSD tiers; the logs stay for reading
      std::fprintf(stderr, "[bench cache] logs kept in %s\n", (run_dir_ / "logs").c_str());
    }
  }

  // Starts every process; returns the gateway's HTTP port.
  uint16_t up() {
    started_ = true;
    g_down_argv = down_argv_.data();
    std::optional<uint16_t> port;
    const int status =
        run_self({"cluster", "up", "--config", config_.string(), "--model", model_.string()},
                 [&](const std::string& line) {
                   std::fprintf(stderr, "[bench cache] %s\n", line.c_str());
                   const std::string tag = "listening gateway-0 ";
                   if (line.rfind(tag, 0) == 0) {
                     const auto colon = line.rfind(':');
                     port = static_cast<uint16_t>(std::atoi(line.c_str() + colon + 1));
                   }
                 });
    if (status != 0)
      throw std::runtime_error("`supernode cluster up --config " + config_.string() +
                               "` failed (exit status " + std::to_string(status) +
                               "; its output is above)");
    if (!port || *port == 0)
      throw std::runtime_error("`supernode cluster up --config " + config_.string() +
                               "` printed no \"listening gateway-0\" line with a port");
    return *port;
  }
  // The sweep on this cluster finished: its folder can go.
  void succeeded() { ok_ = true; }
  const fs::path& config_file() const { return config_; }

private:
  fs::path run_dir_, model_, config_;
  std::vector<std::string> down_args_;
  std::vector<char*> down_argv_;
  bool started_ = false, ok_ = false;
};

// ---- /metrics ----

// GET `path` from 127.0.0.1:port over a fresh connection; the body, or throws naming the URL.
std::string http_get(uint16_t port, const std::string& path, double timeout_s) {
  const std::string what = "GET http://127.0.0.1:" + std::to_string(port) + path;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(what + ": socket failed");
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout_s);
  tv.tv_usec = static_cast<suseconds_t>((timeout_s - std::floor(timeout_s)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  const std::string request = "GET " + path +
                              " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: supernode-bench-cache"
                              "\r\nConnection: close\r\n\r\n";
  bool sent = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
              ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
                  static_cast<ssize_t>(request.size());
  if (sent) {
    char buf[65536];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
      response.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!sent) throw std::runtime_error(what + ": cannot connect");
  const auto head_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos)
    throw std::runtime_error(what + ": no HTTP response");
  const int status = std::atoi(response.c_str() + response.find(' ') + 1);
  if (status != 200) throw std::runtime_error(what + ": HTTP " + std::to_string(status));
  return response.substr(head_end + 4);
}

// The context-cache counters, summed over prefill instances (running totals since start).
struct cache_counters {
  double lookups = 0, lookup_tokens = 0, hit_tokens = 0, stored_blocks = 0, store_failures = 0;
  double load_seconds = 0, loaded_bytes = 0;
};

// Sum of every sample of metric `name` in a Prometheus text exposition.
double metric_sum(const std::string& text, const std::string& name) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != '{' && next != ' ') continue;
    const auto space = line.rfind(' ');
    sum += std::strtod(line.c_str() + space + 1, nullptr);
  }
  return sum;
}

cache_counters read_counters(uint16_t port) {
  const auto text = http_get(port, "/metrics", 10);
  return {metric_sum(text, "supernode_cache_lookups"),
          metric_sum(text, "supernode_cache_lookup_tokens"),
          metric_sum(text, "supernode_cache_hit_tokens"),
          metric_sum(text, "supernode_cache_stored_blocks"),
          metric_sum(text, "supernode_cache_store_failures"),
          metric_sum(text, "supernode_cache_load_seconds"),
          metric_sum(text, "supernode_cache_loaded_bytes")};
}

// Polls /metrics until the instances' stats show `lookups` lookups and `stores` blocks put
// (stored or failed): the counters reach the gateway with the stats, a moment late. Returns
// the last counters and whether they got there within `timeout_s`.
std::pair<cache_counters, bool> wait_for_counters(uint16_t port, double lookups, double stores,
                                                  double timeout_s) {
  const auto deadline = clock_type::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const auto c = read_counters(port);
    if (c.lookups >= lookups && c.stored_blocks + c.store_failures >= stores) return {c, true};
    if (clock_type::now() > deadline) return {c, false};
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// ---- One path's sweep ----

struct rate_point {
  double rate = 0;
  int64_t shared_tokens = 0;       // round(rate * len): the prefix every prompt shares
  int64_t expected_hit_tokens = 0; // the whole cache blocks of it a lookup can load
  int64_t completed = 0, failed = 0;
  std::string first_failure;
  int64_t prompt_tokens = 0; // of completed requests
  double duration_s = 0;
  double throughput = 0; // prompt tokens / s
  lg::latency_summary ttft;
  std::optional<double> measured_reuse;
  // What the prefill instance spent looking up and loading KV from the pool, per looked-up
  // prompt, and the rate of the bytes it loaded: the read path's own cost.
  double load_ms_per_prompt = 0, loaded_mb_per_prompt = 0, load_gb_per_s = 0;
  bool warm = true; // the prefix's blocks were seen stored before the measured run
};

struct sweep_context {
  explicit sweep_context(const cache_bench_options& options) : o(options) {}
  const cache_bench_options& o;
  uint16_t port = 0;
  std::string model_id;
  int32_t token_end = lg::first_special_token;
  double lookups = 0, stores = 0; // what the counters must reach once all settled
};

std::vector<int32_t> random_tokens(lg::random_stream& rng, size_t n, int32_t token_end) {
  std::vector<int32_t> t(n);
  for (auto& v : t)
    v = static_cast<int32_t>(rng.uniform_int(lg::first_random_token, token_end - 1));
  return t;
}

lg::run_result send(const sweep_context& s, const std::vector<lg::planned_request>& plan) {
  lg::run_options ro;
  ro.url = lg::parse_http_url("http://127.0.0.1:" + std::to_string(s.port));
  ro.model = s.model_id;
  ro.max_concurrency = s.o.concurrency;
  ro.timeout_s = s.o.timeout_s;
  return lg::run_load(plan, ro);
}

constexpr double settle_timeout_s = 120;

rate_point run_rate(sweep_context& s, const std::string& path, int path_no, size_t rate_no) {
  const auto& o = s.o;
  rate_point p;
  p.rate = o.rates[rate_no];
  const int64_t len = o.prompt_len, B = o.block_tokens;
  p.shared_tokens = std::llround(p.rate * static_cast<double>(len));
  // A lookup loads whole blocks and always leaves the last prompt token to compute.
  const int64_t hit_blocks = std::min(p.shared_tokens / B, (len - 1) / B);
  p.expected_hit_tokens = hit_blocks * B;
  const int64_t blocks = len / B;

  // A prefix of its own per path and rate point, so nothing one point stored helps another.
  lg::random_stream rng(o.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(path_no) * 1009 +
                        rate_no + 1);
  const auto prefix = random_tokens(rng, static_cast<size_t>(p.shared_tokens), s.token_end);
  auto prompt = [&] {
    lg::planned_request r;
    r.prompt = prefix;
    const auto tail = random_tokens(rng, static_cast<size_t>(len - p.shared_tokens), s.token_end);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.max_tokens = 1;
    return r;
  };
  char label[64];
  std::snprintf(label, sizeof label, "%s rate %g", path.c_str(), p.rate);

  // Warm-up: one request with the prefix puts its blocks (all of its blocks: the pool has none)
  // into the pool. Also at rate 0, so every point starts from the same state.
  const auto warm = send(s, {prompt()});
  if (!warm.outcomes[0].ok)
    throw std::runtime_error(std::string(label) +
                             ": warm-up request failed: " + warm.outcomes[0].error);
  s.lookups += 1;
  s.stores += static_cast<double>(blocks);
  auto [before, settled] = wait_for_counters(s.port, s.lookups, s.stores, settle_timeout_s);
  if (!settled) {
    p.warm = false;
    std::fprintf(stderr,
                 "[bench cache] %s: warning: after %.0f s the pool shows %.0f of %.0f blocks put "
                 "(%.0f lookups of %.0f); measuring anyway\n",
                 label, settle_timeout_s, before.stored_blocks + before.store_failures, s.stores,
                 before.lookups, s.lookups);
  }

  std::vector<lg::planned_request> plan;
  for (int64_t i = 0; i < o.num_prompts; ++i) plan.push_back(prompt());
  std::fprintf(stderr,
               "[bench cache] %s: %lld prompts of %lld tokens, %lld shared, concurrency %lld\n",
               label, static_cast<long long>(o.num_prompts), static_cast<long long>(len),
               static_cast<long long>(p.shared_tokens), static_cast<long long>(o.concurrency));
  const auto result = send(s, plan);

  std::vector<double> ttft;
  for (auto& r : result.outcomes) {
    if (!r.ok) {
      if (p.failed++ == 0) p.first_failure = r.error;
      continue;
    }
    ++p.completed;
    p.prompt_tokens += r.prompt_tokens;
    if (auto m = lg::metrics_of(r); m.ttft_ms) ttft.push_back(*m.ttft_ms);
  }
  p.duration_s = result.duration_s;
  p.throughput = p.duration_s > 0 ? static_cast<double>(p.prompt_tokens) / p.duration_s : 0;
  p.ttft = lg::summarize(ttft);

  // Every completed prompt was looked up and put its blocks past the prefix.
  s.lookups += static_cast<double>(p.completed);
  s.stores += static_cast<double>(p.completed * (blocks - hit_blocks));
  auto [after, done] = wait_for_counters(s.port, s.lookups, s.stores, settle_timeout_s);
  if (!done)
    std::fprintf(stderr,
                 "[bench cache] %s: warning: counters did not settle in %.0f s (%.0f of %.0f "
                 "lookups, %.0f of %.0f blocks put)\n",
                 label, settle_timeout_s, after.lookups, s.lookups,
                 after.stored_blocks + after.store_failures, s.stores);
  // Go on from what the instances really counted, so a shortfall does not stall the next point.
  s.lookups = after.lookups;
  s.stores = after.stored_blocks + after.store_failures;
  if (after.store_failures > before.store_failures)
    std::fprintf(stderr, "[bench cache] %s: warning: %.0f context-cache puts failed\n", label,
                 after.store_failures - before.store_failures);
  const double looked = after.lookup_tokens - before.lookup_tokens;
  if (looked > 0) p.measured_reuse = (after.hit_tokens - before.hit_tokens) / looked;
  const double prompts = after.lookups - before.lookups;
  const double load_s = after.load_seconds - before.load_seconds;
  const double loaded = after.loaded_bytes - before.loaded_bytes;
  if (prompts > 0) {
    p.load_ms_per_prompt = load_s * 1e3 / prompts;
    p.loaded_mb_per_prompt = loaded / 1e6 / prompts;
  }
  if (load_s > 0) p.load_gb_per_s = loaded / 1e9 / load_s;

  std::fprintf(stderr,
               "[bench cache] %s: %lld ok, %lld failed, %.0f prompt tok/s, TTFT mean %.1f ms "
               "p90 %.1f ms, reuse %.3f (expected %.3f)\n",
               label, static_cast<long long>(p.completed), static_cast<long long>(p.failed),
               p.throughput, p.ttft.mean, p.ttft.p90, p.measured_reuse.value_or(0),
               static_cast<double>(p.expected_hit_tokens) / static_cast<double>(len));
  if (p.failed > 0)
    std::fprintf(stderr, "[bench cache] %s: first failure: %s\n", label, p.first_failure.c_str());
  return p;
}

// The config of one path's cluster: pdc-ems with one prefill and one decode, its own name, run
// folder and any free HTTP port, the pool reached over `path`.
std::string derive_config(const std::string& base, const cache_bench_options& o,
                          const std::string& path, const std::string& name, const fs::path& run_dir,
                          std::optional<int> vpc_base_port) {
  std::string t = set_toml_key(base, "cluster", "name", quoted(name));
  t = set_toml_key(t, "cluster", "run_dir", quoted(run_dir.string()));
  // Eight processes share two cores with a busy prefill: a late heartbeat is not a death.
  t = set_toml_key(t, "cluster", "missed_heartbeats", "20");
  t = set_toml_key(t, "gateway", "port", "0");
  t = set_toml_key(t, "process.prefill", "count", "1");
  t = set_toml_key(t, "process.decode", "count", "1");
  t = set_toml_key(t, "model", "path", quoted(o.model.string()));
  t = set_toml_key(t, "ems", "context_cache", "true");
  t = set_toml_key(t, "ems", "block_tokens", std::to_string(o.block_tokens));
  t = set_toml_key(t, "ems", "read_path", quoted(path));
  t = set_toml_key(t, "flows", "ems", quoted(path));
  if (vpc_base_port) {
    t = set_toml_key(t, "planes.vpc", "kind", quoted("zmq"));
    t = set_toml_key(t, "planes.vpc", "transport", quoted("tcp"));
    t = set_toml_key(t, "planes.vpc", "host", quoted("127.0.0.1"));
    t = set_toml_key(t, "planes.vpc", "base_port", std::to_string(*vpc_base_port));
  }
  return t;
}

std::vector<rate_point> run_path(const cache_bench_options& o, const std::string& base_text,
                                 const std::string& path, int path_no, int32_t token_end) {
  const std::string name = "bench-cache-" + std::to_string(::getpid()) + "-" + path;
  const fs::path run_dir = fs::temp_directory_path() / ("supernode-" + name);
  std::string text = derive_config(base_text, o, path, name, run_dir, std::nullopt);
  auto setup = parse_serving_setup(text, "bench cache's " + path + " config", o.model.string());
  if (path == "vpc") {
    const int ports = 3 * static_cast<int>(setup.cluster.instances().size());
    text = derive_config(base_text, o, path, name, run_dir,
                         transport::free_tcp_port_range(ports, path_no));
    setup = parse_serving_setup(text, "bench cache's " + path + " config", o.model.string());
  }

  bench_cluster cluster(run_dir, text, o.model);
  std::fprintf(stderr, "[bench cache] %s: starting the cluster (config %s)\n", path.c_str(),
               cluster.config_file().c_str());
  sweep_context s(o);
  s.port = cluster.up();
  s.token_end = token_end;
  const auto url = lg::parse_http_url("http://127.0.0.1:" + std::to_string(s.port));
  const auto served = lg::fetch_served_model(url, 30);
  s.model_id = served.id;
  if (served.max_model_len > 0 && o.prompt_len + 1 > served.max_model_len)
    throw usage_error("--prompt-len " + std::to_string(o.prompt_len) +
                      " plus one generated token exceeds the server's max_model_len " +
                      std::to_string(served.max_model_len));
  // Stats of a fresh cluster: all zero unless something else used it.
  const auto start = read_counters(s.port);
  s.lookups = start.lookups;
  s.stores = start.stored_blocks + start.store_failures;

  std::vector<rate_point> points;
  for (size_t k = 0; k < o.rates.size(); ++k) points.push_back(run_rate(s, path, path_no, k));
  cluster.succeeded();
  return points;
}

// ---- Report ----

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

// ---- Plot ----

using lg::svg_coord;
using lg::svg_escape;
using lg::svg_number;

const char* path_color(const std::string& path) {
  return path == "ub" ? "#264653" : "#e76f51";
}

using series = std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>>;

// One panel: a line with dots per path, y from 0 so ratios read off the heights.
void draw_panel(std::ostringstream& svg, double x0, double y0, double w, double h,
                const std::string& heading, const std::string& y_label, const series& lines,
                bool legend_right) {
  const double left = x0 + 75, right = x0 + w - 25, top = y0 + 40, bottom = y0 + h - 50;
  double x_hi = 0, y_hi = 0;
  for (auto& [name, pts] : lines)
    for (auto& [x, y] : pts) {
      x_hi = std::max(x_hi, x);
      y_hi = std::max(y_hi, y);
    }
  const auto xt = lg::nice_ticks(0, std::max(x_hi, 0.1), 6);
  const auto yt = lg::nice_ticks(0, y_hi > 0 ? y_hi * 1.05 : 1, 6);
  const double xmax = xt.back(), ymax = yt.back();
  auto sx = [&](double v) { return left + v / xmax * (right - left); };
  auto sy = [&](double v) { return bottom - v / ymax * (bottom - top); };

  svg << "<g font-family=\"sans-serif\" font-size=\"11\">\n";
  svg << "<text x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(y0 + 22)
      << "\" font-size=\"14\" font-weight=\"bold\">" << svg_escape(heading) << "</text>\n";
  for (double t : xt) {
    svg << "<line x1=\"" << svg_coord(sx(t)) << "\" y1=\"" << svg_coord(top) << "\" x2=\""
        << svg_coord(sx(t)) << "\" y2=\"" << svg_coord(bottom) << "\" stroke=\"#e5e5e5\"/>\n";
    svg << "<text x=\"" << svg_coord(sx(t)) << "\" y=\"" << svg_coord(bottom + 15)
        << "\" text-anchor=\"middle\">" << svg_number(t * 100) << "%</text>\n";
  }
  for (double t : yt) {
    svg << "<line x1=\"" << svg_coord(left) << "\" y1=\"" << svg_coord(sy(t)) << "\" x2=\""
        << svg_coord(right) << "\" y2=\"" << svg_coord(sy(t)) << "\" stroke=\"#e5e5e5\"/>\n";
    svg << "<text x=\"" << svg_coord(left - 6) << "\" y=\"" << svg_coord(sy(t) + 4)
        << "\" text-anchor=\"end\">" << svg_number(t, std::abs(t) >= 1000 ? "%.0f" : "%.4g")
        << "</text>\n";
  }
  svg << "<rect x=\"" << svg_coord(left) << "\" y=\"" << svg_coord(top) << "\" width=\""
      << svg_coord(right - left) << "\" height=\"" << svg_coord(bottom - top)
      << "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg << "<text x=\"" << svg_coord((left + right) / 2) << "\" y=\"" << svg_coord(bottom + 36)
      << "\" text-anchor=\"middle\">token reuse rate</text>\n";
  svg << "<text transform=\"translate(" << svg_coord(x0 + 18) << ","
      << svg_coord((top + bottom) / 2) << ") rotate(-90)\" text-anchor=\"middle\">"
      << svg_escape(y_label) << "</text>\n";

  for (auto& [name, pts] : lines) {
    if (pts.empty()) continue;
    std::ostringstream d;
    for (size_t i = 0; i < pts.size(); ++i)
      d << (i ? " L" : "M") << svg_coord(sx(pts[i].first)) << "," << svg_coord(sy(pts[i].second));
    svg << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"" << path_color(name)
        << "\" stroke-width=\"2\"/>\n";
    for (auto& [x, y] : pts)
      svg << "<circle cx=\"" << svg_coord(sx(x)) << "\" cy=\"" << svg_coord(sy(y))
          << "\" r=\"3.5\" fill=\"" << path_color(name) << "\"><title>" << svg_escape(name) << " "
          << svg_number(x * 100) << "%: " << svg_number(y) << "</title></circle>\n";
  }
  // Legend in the top corner the curves leave free (throughput rises, TTFT falls), on white.
  const double lx = legend_right ? right - 128 : left + 8, ly = top + 8;
  svg << "<rect x=\"" << svg_coord(lx) << "\" y=\"" << svg_coord(ly) << "\" width=\"120\" height=\""
      << svg_coord(8 + 16 * static_cast<double>(lines.size()))
      << "\" fill=\"white\" fill-opacity=\"0.9\" stroke=\"#ccc\"/>\n";
  for (size_t i = 0; i < lines.size(); ++i) {
    const double y = ly + 16 + 16 * static_cast<double>(i);
    svg << "<rect x=\"" << svg_coord(lx + 8) << "\" y=\"" << svg_coord(y - 6)
        << "\" width=\"14\" height=\"3\" fill=\"" << path_color(lines[i].first) << "\"/>\n";
    svg << "<text x=\"" << svg_coord(lx + 28) << "\" y=\"" << svg_coord(y) << "\">EMS over "
        << (lines[i].first == "ub" ? "UB" : "VPC") << "</text>\n";
  }
  svg << "</g>\n";
}

std::string
render_svg(const cache_bench_options& o, const std::string& model_id,
           const std::vector<std::pair<std::string, std::vector<rate_point>>>& results) {
  constexpr double W = 1000, H = 440, header = 70, panel_w = 500, panel_h = 370;
  series throughput, ttft;
  for (auto& [path, points] : results) {
    throughput.push_back({path, {}});
    ttft.push_back({path, {}});
    for (auto& p : points) {
      if (p.completed == 0) continue;
      throughput.back().second.emplace_back(p.rate, p.throughput);
      ttft.back().second.emplace_back(p.rate, p.ttft.mean);
    }
  }
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
      << "\" viewBox=\"0 0 " << W << " " << H << "\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2
      << "\" y=\"28\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"18\" "
         "font-weight=\"bold\">supernode bench cache: prefill vs token reuse rate</text>\n"
      << "<text x=\"" << W / 2
      << "\" y=\"50\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"12\" "
         "fill=\"#444\">"
      << svg_escape(model_id + " | " + std::to_string(o.prompt_len) + "-token prompts, " +
                    std::to_string(o.num_prompts) + " per rate, concurrency " +
                    std::to_string(o.concurrency) + ", cache blocks of " +
                    std::to_string(o.block_tokens) + " tokens, 1 output token")
      << "</text>\n";
  draw_panel(svg, 0, header, panel_w, panel_h, "Prefill throughput", "prompt tokens / s",
             throughput, false);
  draw_panel(svg, panel_w, header, panel_w, panel_h, "Mean TTFT", "TTFT (ms)", ttft, true);
  svg << "</svg>\n";
  return svg.str();
}

int32_t token_end_of(const fs::path& model) {
  const auto j = nlohmann::json::parse(read_text(model / "config.json"), nullptr, false);
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

// Restores the previous handlers of the signals that take the clusters down.
class signal_guard {
public:
  signal_guard() {
    struct sigaction sa {};
    sa.sa_handler = stop_cluster_and_die;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(signals_); ++i) ::sigaction(signals_[i], &sa, &old_[i]);
  }
  ~signal_guard() {
    for (size_t i = 0; i < std::size(signals_); ++i) ::sigaction(signals_[i], &old_[i], nullptr);
  }
  signal_guard(const signal_guard&) = delete;
  signal_guard& operator=(const signal_guard&) = delete;

private:
  static constexpr int signals_[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3]{};
};

} // namespace

int run_cache_bench(cli_args& args) {
  if (args.take_flag("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  const auto o = parse_options(args);
  const auto base_text = read_text(o.base_config);
  const int32_t token_end = token_end_of(o.model);
  {
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
  std::fprintf(stderr, "[bench cache] model %s, base config %s\n", o.model.c_str(),
               o.base_config.c_str());

  signal_guard signals;
  std::vector<std::pair<std::string, std::vector<rate_point>>> results;
  for (size_t i = 0; i < o.paths.size(); ++i)
    results.emplace_back(o.paths[i],
                         run_path(o, base_text, o.paths[i], static_cast<int>(i), token_end));

  const std::string model_id = o.model.filename().string();
  nlohmann::ordered_json out;
  out["config"] = {{"model", model_id},
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
  nlohmann::ordered_json by_path, speedup;
  bool all_ok = true;
  for (auto& [path, points] : results) {
    auto& list = by_path[path] = nlohmann::ordered_json::array();
    auto& sp = speedup[path] = nlohmann::ordered_json::array();
    const double base = points.front().throughput;
    for (auto& p : points) {
      list.push_back(point_json(p, o.prompt_len));
      sp.push_back({{"rate", p.rate},
                    {"speedup", base > 0 ? nlohmann::ordered_json(p.throughput / base) : nullptr}});
      all_ok = all_ok && p.completed > 0;
    }
  }
  out["paths"] = by_path;
  // Throughput over the lowest rate's (the 0% point, no reuse, by default).
  out["speedup_baseline_rate"] = o.rates.front();
  out["speedup"] = speedup;
  const auto ub =
      std::find_if(results.begin(), results.end(), [](auto& r) { return r.first == "ub"; });
  const auto vpc =
      std::find_if(results.begin(), results.end(), [](auto& r) { return r.first == "vpc"; });
  if (ub != results.end() && vpc != results.end()) {
    auto& ratio = out["ub_over_vpc"] = nlohmann::ordered_json::array();
    for (size_t k = 0; k < o.rates.size(); ++k) {
      const double v = vpc->second[k].throughput;
      ratio.push_back({{"rate", o.rates[k]},
                       {"throughput_ratio",
                        v > 0 ? nlohmann::ordered_json(ub->second[k].throughput / v) : nullptr}});
    }
  }
  out["paper_figure23"] = {{"ub_speedup_at_90pct_reuse", 2.28}, {"ub_over_vpc_max", 1.52}};

  const std::string text = out.dump(2) + "\n";
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (o.json) write_text(*o.json, text);
  write_text(o.svg, render_svg(o, model_id, results));
  std::fprintf(stderr, "[bench cache] plot written to %s\n", o.svg.c_str());
  return all_ok ? 0 : 1;
}

} // namespace supernode::apps
