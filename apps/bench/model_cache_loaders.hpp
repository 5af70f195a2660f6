#pragma once
// The instances of `bench model-cache`: threads of this process that each hold what one
// instance process would (its reader of the bucket, its seat in the cluster when there is a
// pool, its model cache), started together so their loads compete as a cold start's do, and
// what they read summed up.

#include "apps/bench/model_cache_pool.hpp"
#include "services/ems/model_blocks.hpp"
#include "services/ems/model_cache.hpp"
#include "services/ems/object_store.hpp"

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace supernode::apps {

// Seconds from `start` to now.
double seconds_since(std::chrono::steady_clock::time_point start);
// "1.23 GB".
std::string gb(double bytes);

// The pool of an instance that has none: load_from_object_store never asks it.
class no_pool : public services::ems::pool_client {
public:
  std::vector<services::ems::pool_put_outcome>
  put(const std::string&, std::span<const services::ems::pool_put>) override;
  services::ems::pool_get_outcome get(const std::string&, std::span<const std::string>) override;
  std::vector<bool> exists(const std::string&, std::span<const std::string> keys) override;
  size_t remove(const std::string&, std::span<const std::string>) override { return 0; }
  std::vector<std::string> list(const std::string&) override { return {}; }
  services::ems::model_claim claim_model(const std::string&) override;
  void register_model(const std::string&, const std::string&, std::span<const std::byte>,
                      std::span<const std::string>, uint64_t, const std::string&) override {}
};

struct bench_env {
  std::filesystem::path bucket; // the object-store folder
  std::string model_id;         // model A: a folder of the bucket
  std::string switch_id;        // model B
  double bandwidth = 0;
  const cluster_files* cluster = nullptr; // null until the pool runs
};

// What one instance process would hold: its reader of the bucket (the cap is the bucket's, so
// shared with every other reader), its seat in the cluster when there is a pool, its cache.
struct instance {
  std::unique_ptr<services::ems::object_store> bucket;
  no_pool none;
  std::unique_ptr<services::ems::pool_session> session;
  std::unique_ptr<services::ems::model_cache> cache;

  instance(const bench_env& env, const std::string& name, bool with_pool);
};

struct load_result {
  std::string name;
  double seconds = 0;
  std::filesystem::path dir; // the loaded copy
  services::ems::model_cache_stats cache;
  services::ems::object_store_stats bucket;
  std::string error;
};

using load_fn = std::function<std::filesystem::path(instance&, const std::filesystem::path&)>;

// Instances `names` on threads: each sets up (and runs `before`, both untimed), then all start
// `load` at the same instant; each one's time runs from that instant to the end of its load.
// Throws the first instance's error.
std::vector<load_result> load_together(const bench_env& env, const std::vector<std::string>& names,
                                       bool with_pool, const std::filesystem::path& local_root,
                                       const load_fn& load, const load_fn& before = {});

// Every copy holds the original's files; the first also its bytes.
void verify_all(const std::filesystem::path& original, const std::vector<load_result>& results);

// One scenario's loads together.
struct summary {
  double last = 0, mean = 0;
  uint64_t bucket_bytes = 0, bucket_metadata_bytes = 0, pool_bytes = 0, fetches = 0;
  uint64_t fallback_blocks = 0, pool_failures = 0;
  std::vector<double> per_instance;
};

summary summarize(const std::vector<load_result>& results);
nlohmann::json to_json(const summary& s, bool with_pool);
// A warning on stderr when blocks fell back to the bucket or loads gave up on the pool.
void warn_if_degraded(const char* what, const summary& s);

// Bytes of the model's blocks the pool holds (every server's keys of the namespace), and how
// many of its blocks are there.
std::pair<uint64_t, size_t> pool_holds(services::ems::ems_client& client, const std::string& ns,
                                       const services::ems::model_manifest& m);

} // namespace supernode::apps
