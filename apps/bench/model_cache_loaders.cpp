#include "apps/bench/model_cache_loaders.hpp"

#include "apps/bench/model_cache_files.hpp"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <set>
#include <stdexcept>
#include <thread>

namespace supernode::apps {

namespace fs = std::filesystem;
namespace ems = services::ems;

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}

std::vector<ems::pool_put_outcome> no_pool::put(const std::string&,
                                                std::span<const ems::pool_put>) {
  throw std::runtime_error("no pool");
}
ems::pool_get_outcome no_pool::get(const std::string&, std::span<const std::string>) {
  throw std::runtime_error("no pool");
}
std::vector<bool> no_pool::exists(const std::string&, std::span<const std::string> keys) {
  return std::vector<bool>(keys.size(), false);
}
ems::model_claim no_pool::claim_model(const std::string&) {
  throw std::runtime_error("no pool");
}

instance::instance(const bench_env& env, const std::string& name, bool with_pool) {
  bucket = std::make_unique<ems::object_store>(env.bucket, env.bandwidth);
  ems::model_cache_options o;
  ems::pool_client* pool = &none;
  if (with_pool) {
    const auto& c = *env.cluster;
    session =
        std::make_unique<ems::pool_session>(c.cluster, name, transport::new_incarnation(), c.ems);
    await_pool_answers(*session, c);
    if (!session->client().wait_for_servers(std::chrono::seconds(30)))
      throw std::runtime_error("no MP server in the ring after 30 s");
    pool = &session->client();
    o.ns = c.ems.model_namespace;
    o.block_bytes = c.ems.model_block_bytes;
  }
  cache = std::make_unique<ems::model_cache>(*pool, *bucket, o);
}

std::vector<load_result> load_together(const bench_env& env, const std::vector<std::string>& names,
                                       bool with_pool, const fs::path& local_root,
                                       const load_fn& load, const load_fn& before) {
  const size_t n = names.size();
  std::vector<load_result> results(n);
  clock_type::time_point start;
  std::barrier sync(static_cast<std::ptrdiff_t>(n),
                    [&start]() noexcept { start = clock_type::now(); });
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      auto& r = results[i];
      r.name = names[i];
      const auto local = local_root / names[i];
      std::unique_ptr<instance> in;
      try {
        in = std::make_unique<instance>(env, names[i], with_pool);
        if (before) before(*in, local);
      } catch (const std::exception& e) {
        r.error = names[i] + ": " + e.what();
        in.reset();
      }
      sync.arrive_and_wait();
      if (!in) return;
      try {
        const auto bucket_before = in->bucket->stats();
        const auto cache_before = in->cache->stats();
        r.dir = load(*in, local);
        r.seconds = seconds_since(start);
        r.cache = in->cache->stats();
        r.cache.bytes_from_pool -= cache_before.bytes_from_pool;
        r.cache.bytes_from_object_store -= cache_before.bytes_from_object_store;
        r.cache.fallback_blocks -= cache_before.fallback_blocks;
        r.cache.pool_failures -= cache_before.pool_failures;
        r.cache.fetches -= cache_before.fetches;
        r.bucket = in->bucket->stats();
        r.bucket.bytes_read -= bucket_before.bytes_read;
        r.bucket.metadata_bytes -= bucket_before.metadata_bytes;
        std::fprintf(stderr, "  %s: %.2f s (bucket %s, pool %s)\n", names[i].c_str(), r.seconds,
                     gb(static_cast<double>(r.bucket.bytes_read)).c_str(),
                     gb(static_cast<double>(r.cache.bytes_from_pool)).c_str());
      } catch (const std::exception& e) {
        r.error = names[i] + ": " + e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& r : results)
    if (!r.error.empty()) throw std::runtime_error("bench model-cache: " + r.error);
  return results;
}

void verify_all(const fs::path& original, const std::vector<load_result>& results) {
  for (size_t i = 0; i < results.size(); ++i) verify_copy(original, results[i].dir, i == 0);
}

summary summarize(const std::vector<load_result>& results) {
  summary s;
  for (const auto& r : results) {
    s.last = std::max(s.last, r.seconds);
    s.mean += r.seconds / static_cast<double>(results.size());
    s.bucket_bytes += r.bucket.bytes_read;
    s.bucket_metadata_bytes += r.bucket.metadata_bytes;
    s.pool_bytes += r.cache.bytes_from_pool;
    s.fetches += r.cache.fetches;
    s.fallback_blocks += r.cache.fallback_blocks;
    s.pool_failures += r.cache.pool_failures;
    s.per_instance.push_back(r.seconds);
  }
  return s;
}

nlohmann::json to_json(const summary& s, bool with_pool) {
  nlohmann::json j;
  j["cold_start_s"] = s.last;
  j["cold_start_mean_s"] = s.mean;
  j["per_instance_s"] = s.per_instance;
  j["bucket_bytes_read"] = s.bucket_bytes;
  j["bucket_metadata_bytes"] = s.bucket_metadata_bytes;
  if (with_pool) {
    j["pool_bytes_read"] = s.pool_bytes;
    j["fetches_from_bucket"] = s.fetches;
    j["fallback_blocks"] = s.fallback_blocks;
    j["pool_failures"] = s.pool_failures;
  }
  return j;
}

std::pair<uint64_t, size_t> pool_holds(ems::ems_client& client, const std::string& ns,
                                       const ems::model_manifest& m) {
  const auto keys = client.list(ns);
  const std::set<std::string> have(keys.begin(), keys.end());
  uint64_t bytes = 0;
  size_t blocks = 0;
  for (const auto& f : m.files)
    for (const auto& b : f.blocks)
      if (have.count(b.key)) {
        bytes += b.length;
        ++blocks;
      }
  return {bytes, blocks};
}

void warn_if_degraded(const char* what, const summary& s) {
  if (s.fallback_blocks > 0 || s.pool_failures > 0)
    std::fprintf(stderr,
                 "bench model-cache: warning: %s: %llu blocks fell back to the bucket, %llu loads "
                 "gave up on the pool (see the MP servers' logs)\n",
                 what, static_cast<unsigned long long>(s.fallback_blocks),
                 static_cast<unsigned long long>(s.pool_failures));
}

} // namespace supernode::apps
