#include "apps/bench/cache_bench_sweep.hpp"

#include "apps/bench/cache_bench_cluster.hpp"
#include "apps/cli_args.hpp"
#include "apps/serving_setup.hpp"
#include "services/cluster/cluster_file.hpp"
#include "services/loadgen/http_client.hpp"
#include "services/loadgen/load_runner.hpp"
#include "services/loadgen/prometheus_text.hpp"
#include "services/loadgen/workload.hpp"
#include "transport/free_ports.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <unistd.h>

namespace supernode::apps {

namespace lg = services::loadgen;
namespace fs = std::filesystem;

namespace {

using clock_type = std::chrono::steady_clock;

// ---- /metrics ----

// The context-cache counters, summed over prefill instances (running totals since start).
struct cache_counters {
  double lookups = 0, lookup_tokens = 0, hit_tokens = 0, stored_blocks = 0, store_failures = 0;
  double load_seconds = 0, loaded_bytes = 0;
  double blocks_put() const { return stored_blocks + store_failures; }
};

cache_counters read_counters(uint16_t port) {
  const lg::metrics_snapshot m(lg::http_get_ok(
      lg::parse_http_url("http://127.0.0.1:" + std::to_string(port)), "/metrics", 10));
  return {m.sum("supernode_cache_lookups"),        m.sum("supernode_cache_lookup_tokens"),
          m.sum("supernode_cache_hit_tokens"),     m.sum("supernode_cache_stored_blocks"),
          m.sum("supernode_cache_store_failures"), m.sum("supernode_cache_load_seconds"),
          m.sum("supernode_cache_loaded_bytes")};
}

// Polls /metrics until the instances' stats show `lookups` lookups and `stores` blocks put
// (stored or failed): the counters reach the gateway with the stats, a moment late. Returns
// the last counters and whether they got there within `timeout_s`.
std::pair<cache_counters, bool> wait_for_counters(uint16_t port, double lookups, double stores,
                                                  double timeout_s) {
  const auto deadline = clock_type::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const auto c = read_counters(port);
    if (c.lookups >= lookups && c.blocks_put() >= stores) return {c, true};
    if (clock_type::now() > deadline) return {c, false};
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

constexpr double settle_timeout_s = 120;

// ---- One rate point ----

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

// The prompts of one point: its own shared prefix (so nothing one point stored helps another),
// then tokens of each prompt's own.
class prompt_maker {
public:
  prompt_maker(const sweep_context& s, int path_no, size_t rate_no, int64_t shared_tokens)
      : rng_(s.o.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(path_no) * 1009 + rate_no +
             1),
        token_end_(s.token_end), tail_(s.o.prompt_len - shared_tokens) {
    prefix_ = random_tokens(rng_, static_cast<size_t>(shared_tokens), token_end_);
  }
  lg::planned_request next() {
    lg::planned_request r;
    r.prompt = prefix_;
    const auto tail = random_tokens(rng_, static_cast<size_t>(tail_), token_end_);
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.max_tokens = 1;
    return r;
  }

private:
  lg::random_stream rng_;
  int32_t token_end_;
  int64_t tail_;
  std::vector<int32_t> prefix_;
};

// Warm-up: one request with the prefix puts its blocks (all of its blocks: the pool has none)
// into the pool. Also at rate 0, so every point starts from the same state. Returns the
// counters once its puts are seen (or after the settle timeout, with p.warm false).
cache_counters warm_up(sweep_context& s, prompt_maker& prompts, rate_point& p, int64_t blocks,
                       const char* label) {
  const auto warm = send(s, {prompts.next()});
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
                 label, settle_timeout_s, before.blocks_put(), s.stores, before.lookups, s.lookups);
  }
  return before;
}

void record_outcomes(const lg::run_result& result, rate_point& p) {
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
}

// What the prefill instance counted between `before` and `after`: reuse and load costs.
void record_counters(const cache_counters& before, const cache_counters& after, rate_point& p,
                     const char* label) {
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
}

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
  prompt_maker prompts(s, path_no, rate_no, p.shared_tokens);
  char label[64];
  std::snprintf(label, sizeof label, "%s rate %g", path.c_str(), p.rate);

  const auto before = warm_up(s, prompts, p, blocks, label);
  std::vector<lg::planned_request> plan;
  for (int64_t i = 0; i < o.num_prompts; ++i) plan.push_back(prompts.next());
  std::fprintf(stderr,
               "[bench cache] %s: %lld prompts of %lld tokens, %lld shared, concurrency %lld\n",
               label, static_cast<long long>(o.num_prompts), static_cast<long long>(len),
               static_cast<long long>(p.shared_tokens), static_cast<long long>(o.concurrency));
  record_outcomes(send(s, plan), p);

  // Every completed prompt was looked up and put its blocks past the prefix.
  s.lookups += static_cast<double>(p.completed);
  s.stores += static_cast<double>(p.completed * (blocks - hit_blocks));
  auto [after, done] = wait_for_counters(s.port, s.lookups, s.stores, settle_timeout_s);
  if (!done)
    std::fprintf(stderr,
                 "[bench cache] %s: warning: counters did not settle in %.0f s (%.0f of %.0f "
                 "lookups, %.0f of %.0f blocks put)\n",
                 label, settle_timeout_s, after.lookups, s.lookups, after.blocks_put(), s.stores);
  // Go on from what the instances really counted, so a shortfall does not stall the next point.
  s.lookups = after.lookups;
  s.stores = after.blocks_put();
  record_counters(before, after, p, label);

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

// ---- One path's cluster ----

// The config of one path's cluster: pdc-ems with one prefill and one decode, its own name, run
// folder and any free HTTP port, the pool reached over `path`.
std::string derive_config(const std::string& base, const cache_bench_options& o,
                          const std::string& path, const std::string& name, const fs::path& run_dir,
                          std::optional<int> vpc_base_port) {
  services::cluster::cluster_file f(base);
  f.own_cluster(name, run_dir);
  // Eight processes share two cores with a busy prefill: a late heartbeat is not a death.
  f.set("cluster", "missed_heartbeats", "20");
  f.set("gateway", "port", "0");
  f.set("process.prefill", "count", "1");
  f.set("process.decode", "count", "1");
  f.set_string("model", "path", o.model.string());
  f.set("ems", "context_cache", "true");
  f.set("ems", "block_tokens", std::to_string(o.block_tokens));
  f.set_string("ems", "read_path", path);
  f.set_string("flows", "ems", path);
  if (vpc_base_port) {
    f.set_string("planes.vpc", "kind", "zmq");
    f.set_string("planes.vpc", "transport", "tcp");
    f.set_string("planes.vpc", "host", "127.0.0.1");
    f.set("planes.vpc", "base_port", std::to_string(*vpc_base_port));
  }
  return f.text();
}

// The served model's id, checked against the prompt length.
std::string served_model_id(const cache_bench_options& o, uint16_t port) {
  const auto url = lg::parse_http_url("http://127.0.0.1:" + std::to_string(port));
  const auto served = lg::fetch_served_model(url, 30);
  if (served.max_model_len > 0 && o.prompt_len + 1 > served.max_model_len)
    throw usage_error("--prompt-len " + std::to_string(o.prompt_len) +
                      " plus one generated token exceeds the server's max_model_len " +
                      std::to_string(served.max_model_len));
  return served.id;
}

} // namespace

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

  cache_bench_cluster cluster(run_dir, text, o.model);
  std::fprintf(stderr, "[bench cache] %s: starting the cluster (config %s)\n", path.c_str(),
               cluster.config_file().c_str());
  sweep_context s(o);
  s.port = cluster.up();
  s.token_end = token_end;
  s.model_id = served_model_id(o, s.port);
  // Stats of a fresh cluster: all zero unless something else used it.
  const auto start = read_counters(s.port);
  s.lookups = start.lookups;
  s.stores = start.blocks_put();

  std::vector<rate_point> points;
  for (size_t k = 0; k < o.rates.size(); ++k) points.push_back(run_rate(s, path, path_no, k));
  cluster.succeeded();
  return points;
}

} // namespace supernode::apps
