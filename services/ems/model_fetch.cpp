#include "services/ems/model_fetch.hpp"

#include "log/log.hpp"
#include "services/ems/pool_session.hpp"

namespace supernode::services::ems {

model_fetch_result fetch_model_through_pool(const transport::cluster_config& cluster,
                                            const serving_config& serving,
                                            const std::string& instance, uint64_t incarnation) {
  const auto& config = serving.ems;
  const std::string id = serving.model_id();
  const auto start = std::chrono::steady_clock::now();
  const log::logger log{instance, incarnation};
  object_store bucket(config.object_store, config.object_store_bandwidth);
  model_fetch_result result;
  {
    pool_session session(cluster, instance, incarnation, config);
    auto& client = session.client();
    model_cache_options options;
    options.ns = config.model_namespace;
    options.block_bytes = config.model_block_bytes;
    model_cache cache(client, bucket, options);
    // Started together with the pool: give its servers a moment to come up, then go on (the
    // cache falls back to the bucket when the pool cannot help).
    if (!client.wait_for_servers(std::chrono::seconds(10)))
      log.warn("no MP server came up; loading model {} from object storage", id);
    result.dir = cache.load(id, id, cluster.run_dir / "models" / instance);
    result.stats = cache.stats();
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log.info("model {} through the pool in {:.2f} s: {}, {} bytes from the pool, {} from object "
           "storage ({} blocks fell back)",
           id, result.seconds,
           result.stats.fetches > 0 ? "fetched from object storage" : "read from the pool",
           result.stats.bytes_from_pool, result.stats.bytes_from_object_store,
           result.stats.fallback_blocks);
  return result;
}

} // namespace supernode::services::ems
