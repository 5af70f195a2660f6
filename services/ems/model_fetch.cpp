#include "services/ems/model_fetch.hpp"

#include "services/ems/ems_client.hpp"
#include "services/protocol/ems_messages.hpp"
#include "transport/endpoint.hpp"
#include "transport/plane_factory.hpp"

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

namespace supernode::services::ems {

namespace {

// Heartbeats while the fetch runs, so peers keep the instance alive and requests expire.
class heartbeat_clock {
public:
  explicit heartbeat_clock(transport::endpoint& ep)
      : thread_([this, &ep, interval = ep.cluster().heartbeat_interval] {
          std::unique_lock lock(mutex_);
          while (!cv_.wait_for(lock, interval, [&] { return stopping_; }))
            ep.tick(std::chrono::steady_clock::now());
        }) {}
  ~heartbeat_clock() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace

model_fetch_result fetch_model_through_pool(const transport::cluster_config& cluster,
                                            const serving_config& serving,
                                            const std::string& instance, uint64_t incarnation) {
  const auto& config = serving.ems;
  const std::string id = serving.model_id();
  const auto start = std::chrono::steady_clock::now();
  protocol::register_ems_messages();
  object_store bucket(config.object_store, config.object_store_bandwidth);
  transport::endpoint ep(cluster, instance, transport::make_plane, incarnation);
  std::unique_ptr<ems_client> client;
  std::mutex client_mutex;
  ep.set_message_handler([&](const transport::peer_id&, transport::envelope m) {
    std::lock_guard lock(client_mutex);
    if (auto* v = m.get<protocol::ems_ring_view>(); v && client) client->on_ring_view(*v);
  });
  ep.start();
  model_fetch_result result;
  {
    heartbeat_clock clock(ep);
    {
      std::lock_guard lock(client_mutex);
      client = std::make_unique<ems_client>(ep, config);
    }
    model_cache_options options;
    options.ns = config.model_namespace;
    options.block_bytes = config.model_block_bytes;
    model_cache cache(*client, bucket, options);
    // Started together with the pool: give its servers a moment to come up, then go on (the
    // cache falls back to the bucket when the pool cannot help).
    if (!client->wait_for_servers(std::chrono::seconds(10)))
      std::fprintf(stderr, "%s: no MP server came up; loading model %s from object storage\n",
                   instance.c_str(), id.c_str());
    result.dir = cache.load(id, id, cluster.run_dir / "models" / instance);
    result.stats = cache.stats();
  }
  ep.stop();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr,
               "%s: model %s through the pool in %.2f s: %s, %llu bytes from the pool, %llu "
               "from object storage (%llu blocks fell back)\n",
               instance.c_str(), id.c_str(), result.seconds,
               result.stats.fetches > 0 ? "fetched from object storage" : "read from the pool",
               static_cast<unsigned long long>(result.stats.bytes_from_pool),
               static_cast<unsigned long long>(result.stats.bytes_from_object_store),
               static_cast<unsigned long long>(result.stats.fallback_blocks));
  return result;
}

} // namespace supernode::services::ems
