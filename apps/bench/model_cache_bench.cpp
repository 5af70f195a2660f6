#include "apps/bench/model_cache_bench.hpp"

#include "apps/bench/model_cache_files.hpp"
#include "apps/bench/model_cache_loaders.hpp"
#include "apps/bench/model_cache_pool.hpp"
#include "apps/bench/model_cache_report.hpp"
#include "apps/bench/stop_signals.hpp"
#include "apps/cli_args.hpp"
#include "transport/shm_segment.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace supernode::apps {

namespace fs = std::filesystem;
namespace ems = services::ems;

namespace {

using clock_type = std::chrono::steady_clock;

constexpr const char* usage = R"(usage: supernode bench model-cache [options]

The paper's Table 2 (model caching) on this host. N instances - threads of this process, each
with its own object-store reader and, with the pool, its own seat ("loader-<i>") in a generated
cluster - load one model from a folder standing in for an object-storage bucket whose bandwidth
cap all of them share:
  no cache    every instance reads the whole model from the bucket at once (cold start);
  local DRAM  the same cold start, then a warm start: one instance copies the folder it already
              holds (its node's DRAM cache) again; DRAM overhead N x the model;
  EMS         an MP controller and two MP servers (child processes): all instances call the
              model cache at once, one fetches from the bucket and the others read the pool
              (cold start); a new instance then loads the model already in the pool (warm start);
              DRAM overhead 1 x the model;
  switch      one instance serving the model switches to a second model B (the same files under
              another folder name, so other keys): from the bucket, or from the pool with B
              prefetched.
"Loaded" means the model's files, byte-identical, are in the instance's local folder: OBS->DRAM.
The weights are not parsed and nothing moves DRAM->NPU.

  --model DIR       the model folder in the bucket: the bucket is DIR's parent and the model id
                    DIR's name (default models/demo)
  --bandwidth B     the bucket's cap in bytes/s, shared by every reader (default 2.5e9, the
                    paper's)
  --instances N     instances starting the model together (default 8; --quick 4)
  --dram-bytes B    [ems] dram_bytes of each of the 2 MP servers (default: room for 2 models)
  --json FILE       also write the JSON report to FILE
  --quick           4 instances by default, and a small model is fine

Local copies live under the temporary folder and are removed after each scenario; the pool's
processes are stopped (SIGTERM) and its folder removed at the end, also on error or a signal.
)";

struct model_cache_options {
  bool quick = false;
  std::string model = "models/demo";
  double bandwidth = 2.5e9;
  int instances = 8;
  int64_t dram_bytes = 0; // 0: room for two models
  std::optional<std::string> json;
};

model_cache_options parse_options(cli_args& args) {
  model_cache_options o;
  o.quick = args.take_flag("--quick");
  o.model = args.take_or("--model", o.model);
  o.bandwidth = args.take_double("--bandwidth", o.bandwidth, 1e3, 1e13);
  o.instances = static_cast<int>(args.take_int("--instances", o.quick ? 4 : 8, 1, 64));
  o.dram_bytes = args.take_int("--dram-bytes", 0, 0, int64_t{1} << 40);
  o.json = args.take("--json");
  args.expect_consumed("bench model-cache");
  return o;
}

uint64_t round_up_mib(double bytes) {
  const double mib = 1 << 20;
  return static_cast<uint64_t>(std::ceil(bytes / mib)) << 20;
}

// The model folder checked and measured, and the pool's tiers sized for it.
model_cache_setup make_setup(const model_cache_options& o) {
  model_cache_setup s;
  std::error_code ec;
  s.model_dir = fs::canonical(o.model, ec);
  if (ec || !fs::is_directory(s.model_dir))
    throw usage_error("--model: no model folder at " + o.model +
                      (o.model == "models/demo"
                           ? " (pass --model DIR: a model folder, e.g. one made by `supernode "
                             "model make --preset tiny --out DIR`)"
                           : ""));
  s.id = s.model_dir.filename().string();
  if (s.id.find('@') != std::string::npos)
    throw usage_error("--model: the folder name " + s.id + " (the model id) must not hold '@'");
  const auto files = files_of(s.model_dir);
  s.files = files.size();
  s.model_bytes = std::accumulate(files.begin(), files.end(), uint64_t{0},
                                  [](uint64_t sum, const auto& f) { return sum + f.second; });
  if (files.empty()) throw usage_error("--model: no files in " + s.model_dir.string());
  if (!o.quick && s.model_bytes < (100ull << 20))
    std::fprintf(stderr,
                 "bench model-cache: note: the model is small (%s): fixed costs weigh "
                 "more than the bucket's cap\n",
                 gb(static_cast<double>(s.model_bytes)).c_str());
  s.bandwidth = o.bandwidth;
  s.instances = o.instances;
  s.bucket = s.model_dir.parent_path();

  // Room for models A and B in the pool's DRAM (the switch reads B from DRAM, A stays), with
  // slack for the ring's uneven split; the SSD tier (write-through) for every instance's model.
  const double watermark = ems::ems_config{}.dram_high_watermark;
  const double model = static_cast<double>(s.model_bytes);
  s.dram_bytes =
      o.dram_bytes > 0
          ? static_cast<uint64_t>(o.dram_bytes)
          : std::max<uint64_t>(64ull << 20, round_up_mib(2.0 * model * 1.3 / 2 / watermark));
  s.ssd_bytes = std::max<uint64_t>(256ull << 20, round_up_mib((s.instances + 2) * model * 1.3 / 2));
  return s;
}

// Instance names: loader-0..n-1 start together, loader-n is the warm start, loader-n+1
// switches, loader-n+2 is the bench's own seat (waits for the ring, prefetches, looks).
struct instance_names {
  std::vector<std::string> together;
  std::string warm, switcher, operator_seat;
  int seats = 0;
};

instance_names names_for(int n) {
  instance_names names;
  for (int i = 0; i < n; ++i) names.together.push_back("loader-" + std::to_string(i));
  names.warm = "loader-" + std::to_string(n);
  names.switcher = "loader-" + std::to_string(n + 1);
  names.operator_seat = "loader-" + std::to_string(n + 2);
  names.seats = n + 3;
  return names;
}

// What every scenario works with.
struct scenario {
  const model_cache_setup& setup;
  bench_env env;
  fs::path work; // local copies go below
  fs::path switch_dir;
  instance_names names;
};

// Reads model `id` into `dir`: from the bucket alone, or through the model cache.
using fetch_fn = std::function<fs::path(instance&, const std::string& id, const fs::path& dir)>;

fs::path from_bucket(instance& in, const std::string& id, const fs::path& dir) {
  return in.cache->load_from_object_store(id, id, dir);
}
fs::path through_cache(instance& in, const std::string& id, const fs::path& dir) {
  return in.cache->load(id, id, dir);
}

// An instance serving A (loaded untimed) switches to B: loads B and drops A.
summary switch_a_to_b(const scenario& sc, bool with_pool, const std::string& folder,
                      const fetch_fn& fetch) {
  const scoped_dir local(sc.work / folder);
  const auto r = load_together(
      sc.env, {sc.names.switcher}, with_pool, local.path(),
      [&](instance& in, const fs::path& dir) {
        auto b = fetch(in, sc.env.switch_id, dir);
        fs::remove_all(dir / "a");
        return b;
      },
      [&](instance& in, const fs::path& dir) { return fetch(in, sc.env.model_id, dir / "a"); });
  verify_copy(sc.switch_dir, r[0].dir, true);
  return summarize(r);
}

// 1. No cache, cold: every instance reads the whole model from the bucket. 2. Local DRAM: the
// same cold start; warm = the instance copies the folder it holds again.
void run_without_pool(const scenario& sc, model_cache_results& out) {
  const auto& names = sc.names.together;
  std::fprintf(stderr,
               "bench model-cache: [1/4] no cache: %d instances read %s from the bucket "
               "at once\n",
               sc.setup.instances, sc.setup.id.c_str());
  const scoped_dir local(sc.work / "no-cache");
  const auto fetch_a = [&](instance& in, const fs::path& dir) {
    return from_bucket(in, sc.env.model_id, dir);
  };
  const auto r = load_together(sc.env, names, false, local.path(), fetch_a);
  verify_all(sc.setup.model_dir, r);
  out.no_cache = summarize(r);

  std::fprintf(stderr,
               "bench model-cache: [2/4] local DRAM warm start: %s copies its own "
               "copy\n",
               names[0].c_str());
  for (size_t i = 1; i < r.size(); ++i) fs::remove_all(r[i].dir);
  const auto start = clock_type::now();
  copy_folder(r[0].dir, local.path() / "warm");
  out.local_warm_s = seconds_since(start);
  verify_copy(sc.setup.model_dir, local.path() / "warm", false);
  std::fprintf(stderr, "  %s: %.2f s\n", names[0].c_str(), out.local_warm_s);
}

// 3. EMS: the pool starts empty; all instances call the model cache at once (cold), then a new
// instance loads the model already in the pool (warm).
void run_pool_starts(const scenario& sc, ems::ems_client& pool, const ems::model_manifest& a,
                     model_cache_results& out) {
  const auto fetch_a = [&](instance& in, const fs::path& dir) {
    return through_cache(in, sc.env.model_id, dir);
  };
  {
    std::fprintf(stderr,
                 "bench model-cache: [3/4] EMS cold start: %d instances load %s through the "
                 "model cache at once\n",
                 sc.setup.instances, sc.setup.id.c_str());
    const scoped_dir local(sc.work / "ems-cold");
    const auto r = load_together(sc.env, sc.names.together, true, local.path(), fetch_a);
    verify_all(sc.setup.model_dir, r);
    out.ems_cold = summarize(r);
    warn_if_degraded("EMS cold start", out.ems_cold);
  }
  const auto& ns = sc.env.cluster->ems.model_namespace;
  const auto [bytes_a, blocks_a] = pool_holds(pool, ns, a);
  out.pool_bytes_a = bytes_a;
  out.pool_complete_a = blocks_a == a.block_count();
  std::fprintf(stderr, "bench model-cache: [3/4] EMS warm start: %s loads %s from the pool\n",
               sc.names.warm.c_str(), sc.setup.id.c_str());
  const scoped_dir local(sc.work / "ems-warm");
  const auto r = load_together(sc.env, {sc.names.warm}, true, local.path(), fetch_a);
  verify_copy(sc.setup.model_dir, r[0].dir, true);
  out.ems_warm = summarize(r);
  warn_if_degraded("EMS warm start", out.ems_warm);
}

// Model B from the bucket into the pool (through the bucket's cap); the seconds it took.
double prefetch_b(const scenario& sc, ems::ems_client& pool) {
  ems::object_store bucket(sc.env.bucket, sc.env.bandwidth);
  ems::model_cache_options o;
  o.ns = sc.env.cluster->ems.model_namespace;
  o.block_bytes = sc.env.cluster->ems.model_block_bytes;
  ems::model_cache prefetcher(pool, bucket, o);
  const auto start = clock_type::now();
  const auto p = prefetcher.prefetch(sc.env.switch_id, sc.env.switch_id);
  if (!p.failure.empty())
    throw std::runtime_error("bench model-cache: prefetch of model B " + sc.env.switch_id +
                             " failed: " + p.failure);
  const double s = seconds_since(start);
  std::fprintf(stderr, "  prefetch of B (bucket -> pool): %.2f s\n", s);
  return s;
}

// 3 and 4b on a pool of their own, stopped at the end.
void run_with_pool(scenario& sc, const cluster_files& cluster, model_cache_results& out) {
  std::fprintf(stderr,
               "bench model-cache: starting the pool: MP controller + 2 MP servers, %s DRAM and "
               "%s SSD each (cluster %s)\n",
               gb(static_cast<double>(sc.setup.dram_bytes)).c_str(),
               gb(static_cast<double>(sc.setup.ssd_bytes)).c_str(), cluster.config_file.c_str());
  pool_cluster pool(cluster, sc.names.operator_seat);
  sc.env.cluster = &cluster;
  ems::object_store unthrottled(sc.env.bucket, 0);
  const auto block_bytes = cluster.ems.model_block_bytes;
  const auto manifest_a =
      ems::plan_model_blocks(unthrottled, sc.env.model_id, sc.env.model_id, block_bytes);
  const auto manifest_b =
      ems::plan_model_blocks(unthrottled, sc.env.switch_id, sc.env.switch_id, block_bytes);
  run_pool_starts(sc, pool.client(), manifest_a, out);

  std::fprintf(stderr, "bench model-cache: [4/4, part 2] switch A->B with B prefetched into "
                       "the pool\n");
  out.prefetch_b_s = prefetch_b(sc, pool.client());
  const auto& ns = cluster.ems.model_namespace;
  const auto [bytes_b, blocks_b] = pool_holds(pool.client(), ns, manifest_b);
  const auto [bytes_a, blocks_a] = pool_holds(pool.client(), ns, manifest_a);
  out.pool_bytes_ab = bytes_a + bytes_b;
  out.pool_holds_both =
      blocks_b == manifest_b.block_count() && blocks_a == manifest_a.block_count();
  out.switch_ems = switch_a_to_b(sc, true, "switch-ems", through_cache);
  warn_if_degraded("EMS switch", out.switch_ems);
}

} // namespace

int run_model_cache_bench(cli_args& args) {
  if (args.take_flag("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  const auto options = parse_options(args);
  const auto setup = make_setup(options);

  const stop_signal_watcher watcher("bench model-cache"); // before any thread: they inherit
                                                          // the blocked signals
  const scoped_dir work(fs::temp_directory_path() /
                        ("supernode-model-cache-" + std::to_string(::getpid())));
  const std::string switch_id = setup.id + "-switch-" + std::to_string(::getpid());
  const scoped_dir switch_dir(setup.bucket / switch_id);
  make_switch_model(setup.model_dir, switch_dir.path());

  bench_env env;
  env.bucket = setup.bucket;
  env.model_id = setup.id;
  env.switch_id = switch_id;
  env.bandwidth = setup.bandwidth;
  scenario sc{setup, env, work.path(), switch_dir.path(), names_for(setup.instances)};
  const auto cluster =
      write_cluster(work.path(), sc.names.seats, setup.dram_bytes, setup.ssd_bytes);

  std::fprintf(stderr,
               "bench model-cache: model %s (%s, %zu files) in bucket %s at %.3g B/s, %d "
               "instances; loaded = files in a local folder (OBS->DRAM; weights not parsed, no "
               "DRAM->NPU)\n",
               setup.id.c_str(), gb(static_cast<double>(setup.model_bytes)).c_str(), setup.files,
               setup.bucket.c_str(), setup.bandwidth, setup.instances);

  model_cache_results results;
  run_without_pool(sc, results);
  // 4a. Switch without a cache: an instance serving A loads B from the bucket and drops A.
  std::fprintf(stderr, "bench model-cache: [4/4, part 1] switch A->B without a cache\n");
  results.switch_no_cache = switch_a_to_b(sc, false, "switch-no-cache", from_bucket);
  run_with_pool(sc, cluster, results);
  transport::cleanup_stale_segments(cluster.name); // anything a crashed process left
  std::fprintf(stderr, "bench model-cache: pool stopped\n");

  report_model_cache(setup, results, options.json);
  return 0;
}

} // namespace supernode::apps
