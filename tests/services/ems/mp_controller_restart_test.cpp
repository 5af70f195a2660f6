// An MP controller replaced by a new instance (a new incarnation that knows nothing) over two
// MP servers hosted in this process: while no controller runs, the client and the servers go on
// with the ring they have; the new controller rebuilds the ring, each namespace's usage and the
// model-block index from the servers' reports — the same as the first controller had — so a
// cached model is found in the pool (not fetched again) and context blocks still hit.

#include "../../support/eventually.hpp"
#include "inproc_pool.hpp"
#include "services/ems/model_cache.hpp"
#include "services/ems/object_store.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

using namespace supernode;
using namespace supernode::testing;
using namespace std::chrono_literals;
namespace ems = supernode::services::ems;

namespace {

constexpr const char* context_ns = "context";
constexpr size_t context_blocks = 20;

void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// What a controller knows that a restart must not lose.
struct controller_metadata {
  std::vector<std::string> servers;
  std::map<std::string, services::protocol::ems_namespace_usage> usage;
  std::map<std::string, ems::mp_controller::model_index_entry> models;
  bool operator==(const controller_metadata&) const = default;
};

controller_metadata metadata_of(inproc_pool& pool) {
  return pool.controller().locked([](ems::mp_controller& c) {
    return controller_metadata{c.ring().servers(), c.namespace_usage(), c.model_index()};
  });
}

size_t hits(ems::ems_client& client, const std::vector<std::string>& keys) {
  size_t n = 0;
  for (auto& b : client.get(context_ns, keys).blocks) n += b.has_value();
  return n;
}

} // namespace

TEST(mp_controller_restart, a_new_controller_rebuilds_ring_usage_and_model_index_from_servers) {
  inproc_pool pool("ems-controller-restart", 2);
  auto& client = pool.client();
  ASSERT_TRUE(client.wait_for_ring([&](const auto& s) { return s == pool.server_names(); }, 10s));

  // A model in the pool, fetched once from the bucket.
  const auto bucket = pool.cluster().run_dir / "bucket";
  std::filesystem::create_directories(bucket / "tiny");
  write_file(bucket / "tiny" / "weights.bin", value_of(300 << 10, 7));
  write_file(bucket / "tiny" / "config.json", value_of(200, 8));
  ems::object_store store(bucket, 0);
  ems::model_cache_options options;
  options.ns = pool.ems().model_namespace;
  options.block_bytes = 64 << 10;
  ems::model_cache first(client, store, options);
  const auto fetched = first.prefetch("tiny", "tiny");
  ASSERT_TRUE(fetched.fetched);
  ASSERT_TRUE(fetched.failure.empty()) << fetched.failure;

  // Context blocks.
  std::vector<std::string> keys;
  std::vector<std::vector<std::byte>> values;
  std::vector<ems::pool_put> items;
  for (size_t i = 0; i < context_blocks; ++i) {
    keys.push_back("prefix-" + std::to_string(i));
    values.push_back(value_of(4096, static_cast<unsigned>(i)));
  }
  for (size_t i = 0; i < context_blocks; ++i) items.push_back({keys[i], values[i]});
  for (const auto& o : client.put(context_ns, items)) ASSERT_TRUE(o.stored) << o.error;

  // The first controller's metadata, once the usage reports counted every block put.
  const size_t model_blocks = fetched.manifest.block_count() + 1; // and the manifest block
  ASSERT_TRUE(eventually([&] {
    const auto m = metadata_of(pool);
    return m.usage.count(context_ns) && m.usage.at(context_ns).blocks == context_blocks &&
           m.usage.count(options.ns) && m.usage.at(options.ns).blocks == model_blocks;
  }));
  const auto before = metadata_of(pool);
  ASSERT_EQ(before.models.size(), 1u);

  pool.stop_controller();
  // Without a controller the client and the servers go on with the ring they have.
  EXPECT_EQ(hits(client, keys), context_blocks);
  const std::vector<ems::pool_put> again = {{keys[0], values[0]}}; // same bytes: same usage
  EXPECT_TRUE(client.put(context_ns, again).at(0).stored);

  pool.start_controller(4);
  // The client asks the new controller only once it knows it: a request sent before its first
  // heartbeat arrived fails when that heartbeat announces the new incarnation.
  EXPECT_TRUE(eventually(
      [&] { return pool.client_endpoint().live_incarnation("mp_controller-0") == uint64_t{4}; }));
  EXPECT_TRUE(eventually([&] { return metadata_of(pool) == before; }))
      << metadata_of(pool).servers.size() << " servers, " << metadata_of(pool).models.size()
      << " models, " << metadata_of(pool).usage.size() << " namespaces on the new controller";

  // Another instance finds the model in the pool: no second fetch from the bucket.
  ems::model_cache second(client, store, options);
  const auto found = second.prefetch("tiny", "tiny");
  EXPECT_FALSE(found.fetched) << "the new controller did not know the model was in the pool";
  EXPECT_EQ(found.manifest.key(), fetched.manifest.key());
  EXPECT_TRUE(second.check("tiny", found.manifest.version));
  const auto local = second.load("tiny", "tiny", pool.cluster().run_dir / "local");
  EXPECT_TRUE(std::filesystem::exists(local / "weights.bin"));
  EXPECT_EQ(second.stats().bytes_from_object_store, 0u);
  EXPECT_EQ(hits(client, keys), context_blocks);
}
