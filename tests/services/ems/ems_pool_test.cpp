// The memory pool as deployed: an MP controller and MP servers as processes of the real binary,
// the MP SDK in this process on a probe endpoint. Reads over UB (copied out of the servers'
// shared regions) and over VPC (bytes in the replies), namespaces and quotas, a server killed
// with SIGKILL under load and restarted, and servers joining and leaving the ring while clients
// run. Values are a function of their key, so any wrong byte is seen. Waits are on conditions
// (ring views arriving, counters reaching a value), never on time.

#include "../../support/child_process.hpp"
#include "../../support/sanitizer_slowdown.hpp"
#include "services/ems/hash_ring.hpp"
#include "services/ems/pool_session.hpp"
#include "services/serving/cluster_file.hpp"
#include "transport/free_ports.hpp"
#include "transport/shm_plane.hpp"
#include "transport/shm_segment.hpp"

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unistd.h>

using namespace supernode;
using namespace std::chrono_literals;
namespace ems = supernode::services::ems;
namespace protocol = supernode::services::protocol;
namespace st = supernode::testing;

namespace {

// Bytes of `key`: a length from 0 to 40 KiB and a pattern, both derived from the key.
std::vector<std::byte> value_of(const std::string& key) {
  const uint64_t h = ems::stable_hash(key);
  std::vector<std::byte> v(h % (40 << 10));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>((h >> (i % 56)) + i * 13);
  return v;
}

std::string key_name(const char* prefix, int i) {
  std::string k(prefix);
  k += '-';
  k += std::to_string(i);
  return k;
}

struct pool_cluster {
  std::string name;
  std::filesystem::path dir, config_file;
  transport::cluster_config cluster;
  services::serving_config serving;
  std::unique_ptr<st::child_process> controller;
  std::map<int, std::unique_ptr<st::child_process>> servers;
  std::unique_ptr<ems::pool_session> session; // the test's own instance, "probe-0"
  ems::ems_client* client = nullptr;

  pool_cluster(const std::string& planes, int server_count, const std::string& ems_extra) {
    static int counter = 0;
    name = "ems-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    dir = std::filesystem::temp_directory_path() / name;
    std::filesystem::create_directories(dir);
    config_file = dir / "cluster.toml";
    std::ofstream(config_file)
        << "[cluster]\nname = \"" << name << "\"\nrun_dir = \""
        << dir.string()
        // A sanitized build stalls threads for longer than 10 heartbeats: a bound that tight
        // there fences live servers, which no test here is about.
        << "\"\nheartbeat_ms = 50\nmissed_heartbeats = " << st::scaled(10) << "\n"
        << planes << "\n[process.ems_controller]\nroles = [\"mp_controller\"]\n"
        << "[process.ems]\nroles = [\"mp_server\"]\ncount = " << server_count
        << "\n[process.probe]\nroles = [\"probe\"]\n"
        << "[ems]\ndram_bytes = 8388608\nssd_bytes = 268435456\ntimeout_ms = " << st::scaled(3000)
        << "\n"
        << ems_extra;
    auto file = services::cluster_file::load(config_file);
    cluster = std::move(file.cluster);
    serving = std::move(file.serving);
    controller = spawn("ems_controller", 0);
    for (int i = 0; i < server_count; ++i) start_server(i);
    session = std::make_unique<ems::pool_session>(cluster, "probe-0", transport::new_incarnation(),
                                                  serving.ems);
    client = &session->client();
  }
  ~pool_cluster() {
    session.reset();
    servers.clear();
    controller.reset();
    // The roles were SIGKILLed, so their shm segments stay, and no later run has this cluster's
    // name to clean them up under: without this, each run of this suite left about 300 MB in
    // /dev/shm, which is memory.
    transport::cleanup_stale_segments(name);
    std::filesystem::remove_all(dir);
  }

  std::unique_ptr<st::child_process> spawn(const std::string& process, int id) {
    auto child = std::make_unique<st::child_process>(std::vector<std::string>{
        std::string(SUPERNODE_BINARY_DIR) + "/apps/supernode", "role", process, "--config",
        config_file.string(), "--id", std::to_string(id)});
    if (!child->wait_for_line("ready", 30s))
      throw std::runtime_error(process + " " + std::to_string(id) + " did not get ready");
    return child;
  }
  void start_server(int i) { servers[i] = spawn("ems", i); }

  // Until the client's ring holds exactly these servers.
  bool wait_ring(std::set<std::string> want, std::chrono::seconds timeout = 20s) {
    return client->wait_for_ring(
        [&](const std::vector<std::string>& have) {
          return std::set<std::string>(have.begin(), have.end()) == want;
        },
        timeout);
  }
};

const char* ub_planes = "[planes.ub]\nkind = \"shm\"\n[planes.vpc]\nkind = \"zmq\"\n"
                        "[flows]\ndefault = \"vpc\"\nems = \"ub\"\n";
// A port range of its own per test process (ports are base + 3 x instance ordinal + channel).
const std::string vpc_planes = "[planes.vpc]\nkind = \"zmq\"\ntransport = \"tcp\"\n"
                               "host = \"127.0.0.1\"\nbase_port = " +
                               std::to_string(transport::free_tcp_port_range(12, 6)) +
                               "\n[flows]\ndefault = \"vpc\"\n";

struct read_path_case {
  const char* name;
  std::string planes;
  const char* ems;
  bool ub;
};

class ems_pool_paths : public ::testing::TestWithParam<read_path_case> {};

} // namespace

TEST_P(ems_pool_paths, batch_put_get_exists_remove_list_give_back_every_byte) {
  pool_cluster c(GetParam().planes, 2, GetParam().ems);
  ASSERT_TRUE(c.wait_ring({"mp_server-0", "mp_server-1"}));
  std::vector<std::string> keys;
  std::vector<std::vector<std::byte>> values;
  for (int i = 0; i < 200; ++i) {
    keys.push_back(key_name("blk", i));
    values.push_back(value_of(keys.back()));
  }
  std::vector<ems::pool_put> items;
  for (size_t i = 0; i < keys.size(); ++i) items.push_back({keys[i], values[i]});
  for (auto& o : c.client->put("a", items)) ASSERT_TRUE(o.stored) << o.error;

  auto got = c.client->get("a", keys);
  EXPECT_EQ(got.errors, 0u) << got.first_error;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got.blocks[i].has_value()) << keys[i];
    EXPECT_EQ(*got.blocks[i], values[i]) << keys[i];
  }
  const auto s = c.client->stats();
  if (GetParam().ub) {
    EXPECT_EQ(s.ub_reads, keys.size());
    EXPECT_EQ(s.vpc_reads, 0u);
  } else {
    EXPECT_EQ(s.vpc_reads, keys.size());
    EXPECT_EQ(s.ub_reads, 0u);
  }
  // Both servers hold some: the ring spread the keys.
  ems::hash_ring ring(c.serving.ems.vnodes);
  ring.add_server("mp_server-0");
  ring.add_server("mp_server-1");
  std::set<std::string> owners;
  for (auto& k : keys) owners.insert(ring.owner("a", k));
  EXPECT_EQ(owners.size(), 2u);

  std::vector<std::string> probe_keys = {keys[0], "absent", keys[199]};
  EXPECT_EQ(c.client->exists("a", probe_keys), (std::vector<bool>{true, false, true}));
  std::vector<std::string> gone(keys.begin(), keys.begin() + 100);
  EXPECT_EQ(c.client->remove("a", gone), 100u);
  EXPECT_EQ(c.client->remove("a", gone), 0u);
  auto after = c.client->get("a", keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(after.blocks[i].has_value(), i >= 100);
  std::vector<std::string> left(keys.begin() + 100, keys.end());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(c.client->list("a"), left);
}

INSTANTIATE_TEST_SUITE_P(
    paths, ems_pool_paths,
    ::testing::Values(read_path_case{"ub", ub_planes, "read_path = \"ub\"\n", true},
                      read_path_case{"vpc", vpc_planes, "read_path = \"vpc\"\n", false}),
    [](const auto& info) { return std::string(info.param.name); });

// The client's ring to a server scribbled over: the server stops reading it, and the client's
// next calls go over a fresh ring, so stores and reads work again instead of failing from then on.
TEST(ems_pool, stores_and_gets_work_again_after_the_server_dropped_the_clients_link) {
  pool_cluster c(ub_planes, 1, "read_path = \"ub\"\n");
  ASSERT_TRUE(c.wait_ring({"mp_server-0"}));
  std::vector<std::string> keys = {"before"};
  std::vector<std::vector<std::byte>> values = {value_of("before")};
  const std::vector<ems::pool_put> first = {{keys[0], values[0]}};
  ASSERT_TRUE(c.client->put("ctx", first).at(0).stored);
  // The test reaches into its own endpoint's UB plane (a plane it owns, so the cast is sound).
  auto* ub = const_cast<transport::shm_plane*>(
      dynamic_cast<const transport::shm_plane*>(c.session->endpoint().plane_named("ub")));
  ASSERT_NE(ub, nullptr);
  ASSERT_EQ(ub->corrupt_ring_for_test("mp_server-0"), transport::send_status::ok);

  // A call sent before the server freed the ring's slot is lost with the ring (it times out);
  // the ones after it are served.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  bool stored = false;
  for (int i = 0; !stored && std::chrono::steady_clock::now() < deadline; ++i) {
    const auto key = key_name("retry", i);
    const auto value = value_of(key);
    const std::vector<ems::pool_put> one = {{key, value}};
    stored = c.client->put("ctx", one).at(0).stored;
  }
  ASSERT_TRUE(stored) << "stores never worked again";
  for (int i = 0; i < 50; ++i) {
    keys.push_back(key_name("after", i));
    values.push_back(value_of(keys.back()));
  }
  std::vector<ems::pool_put> items;
  for (size_t i = 1; i < keys.size(); ++i) items.push_back({keys[i], values[i]});
  for (auto& o : c.client->put("ctx", items)) ASSERT_TRUE(o.stored) << o.error;
  const auto got = c.client->get("ctx", keys);
  EXPECT_EQ(got.errors, 0u) << got.first_error;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(got.blocks[i].has_value()) << keys[i];
    EXPECT_EQ(*got.blocks[i], values[i]) << keys[i];
  }
  EXPECT_EQ(c.client->stats().ub_reads, keys.size()) << "reads fell back from UB";
}

TEST(ems_pool, namespaces_are_isolated_and_a_put_over_quota_fails_evicting_nothing) {
  // 256 KiB over the pool: 128 KiB on each of the two servers.
  pool_cluster c(ub_planes, 2, "[ems.quotas]\nsmall = 262144\n");
  ASSERT_TRUE(c.wait_ring({"mp_server-0", "mp_server-1"}));
  const std::vector<std::string> keys = {"k1", "k2", "k3"};
  std::vector<std::vector<std::byte>> a_values, b_values;
  std::vector<ems::pool_put> a_items, b_items;
  for (auto& k : keys) {
    a_values.push_back(value_of("a/" + k));
    b_values.push_back(value_of("b/" + k));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    a_items.push_back({keys[i], a_values[i]});
    b_items.push_back({keys[i], b_values[i]});
  }
  for (auto& o : c.client->put("a", a_items)) ASSERT_TRUE(o.stored) << o.error;
  for (auto& o : c.client->put("b", b_items)) ASSERT_TRUE(o.stored) << o.error;
  auto a = c.client->get("a", keys), b = c.client->get("b", keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(*a.blocks[i], a_values[i]);
    EXPECT_EQ(*b.blocks[i], b_values[i]);
  }
  std::vector<std::string> b_only = {"only-b"};
  auto only = value_of("only-b");
  std::vector<ems::pool_put> only_item = {{"only-b", only}};
  ASSERT_TRUE(c.client->put("b", only_item)[0].stored);
  EXPECT_FALSE(c.client->get("a", b_only).blocks[0].has_value());
  EXPECT_EQ(c.client->exists("a", b_only), std::vector<bool>{false});
  for (auto& k : c.client->list("a")) EXPECT_NE(k, "only-b");
  EXPECT_EQ(c.client->list("b").size(), 4u);

  // Fill "small" with 16 KiB blocks until a put is refused by a quota.
  std::vector<std::byte> block(16 << 10, std::byte{7});
  protocol::error refusal;
  int stored = 0;
  for (int i = 0; i < 64 && refusal.ok(); ++i) {
    std::vector<ems::pool_put> one = {{key_name("s", i), block}};
    auto o = c.client->put("small", one)[0];
    if (o.stored)
      ++stored;
    else
      refusal = o.error;
  }
  EXPECT_TRUE(refusal.is(protocol::ems_errc::quota_exceeded)) << refusal.str();
  EXPECT_NE(refusal.message.find("'small'"), std::string::npos) << refusal.str();
  EXPECT_GE(stored, 7);  // at least one server's 128 KiB share was reached
  EXPECT_LE(stored, 16); // never more than the pool's 256 KiB
  // Nothing of another namespace was evicted to make room.
  auto a_after = c.client->get("a", keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(*a_after.blocks[i], a_values[i]);
  EXPECT_EQ(c.client->list("b").size(), 4u);
}

namespace {

// Puts keys in batches and reads acknowledged ones back until told to stop; counts what it saw.
struct load_driver {
  ems::pool_client& pool;
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable progress;
  std::vector<std::string> acked; // keys whose put was acknowledged (persisted)
  std::atomic<int> wrong{0}, read_misses{0}, reads{0}, failed_puts{0};
  std::thread writer, reader;
  int next = 0;

  explicit load_driver(ems::pool_client& p) : pool(p) {
    writer = std::thread([this] {
      while (!stop) {
        std::vector<std::string> keys;
        std::vector<std::vector<std::byte>> values;
        for (int i = 0; i < 8; ++i) {
          keys.push_back(key_name("load", next++));
          values.push_back(value_of(keys.back()));
        }
        std::vector<ems::pool_put> items;
        for (size_t i = 0; i < keys.size(); ++i) items.push_back({keys[i], values[i]});
        auto outcome = pool.put("load", items);
        std::lock_guard lock(mutex);
        for (size_t i = 0; i < keys.size(); ++i)
          outcome[i].stored ? acked.push_back(keys[i]) : void(++failed_puts);
        progress.notify_all();
      }
    });
    reader = std::thread([this] {
      uint64_t x = 1;
      while (!stop) {
        std::vector<std::string> keys;
        {
          std::lock_guard lock(mutex);
          for (int i = 0; i < 8 && !acked.empty(); ++i) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            keys.push_back(acked[(x >> 33) % acked.size()]);
          }
        }
        if (keys.empty()) continue;
        auto got = pool.get("load", keys);
        for (size_t i = 0; i < keys.size(); ++i) {
          ++reads;
          if (!got.blocks[i])
            ++read_misses;
          else if (*got.blocks[i] != value_of(keys[i]))
            ++wrong;
        }
        std::lock_guard lock(mutex);
        progress.notify_all();
      }
    });
  }
  ~load_driver() { finish(); }
  void finish() {
    stop = true;
    if (writer.joinable()) writer.join();
    if (reader.joinable()) reader.join();
  }
  // Until `n` more puts were acknowledged than when called.
  bool wait_acked(size_t n, std::chrono::seconds timeout = 30s) {
    std::unique_lock lock(mutex);
    const size_t target = acked.size() + n;
    return progress.wait_for(lock, timeout, [&] { return acked.size() >= target; });
  }
  std::vector<std::string> acked_keys() {
    std::lock_guard lock(mutex);
    return acked;
  }
};

} // namespace

TEST(ems_pool, a_server_killed_under_load_serves_every_acknowledged_block_after_restart) {
  pool_cluster c(ub_planes, 2, "");
  ASSERT_TRUE(c.wait_ring({"mp_server-0", "mp_server-1"}));
  load_driver load(*c.client);
  ASSERT_TRUE(load.wait_acked(200));
  c.servers[1]->signal(SIGKILL);
  ASSERT_TRUE(c.servers[1]->wait(10s));
  // Calls in flight fail (a miss, a refused put), none hangs; the ring drops the server.
  ASSERT_TRUE(c.wait_ring({"mp_server-0"}));
  ASSERT_TRUE(load.wait_acked(100)); // every put now lands on mp_server-0
  c.start_server(1);                 // rebuilds its index from its SSD tier
  ASSERT_TRUE(c.wait_ring({"mp_server-0", "mp_server-1"}));
  ASSERT_TRUE(load.wait_acked(100));
  load.finish();
  EXPECT_EQ(load.wrong, 0);
  EXPECT_GT(load.reads, 0);
  const auto acked = load.acked_keys();
  auto got = c.client->get("load", acked);
  size_t served = 0;
  for (size_t i = 0; i < acked.size(); ++i) {
    if (!got.blocks[i]) {
      ADD_FAILURE() << "acknowledged block " << acked[i] << " is not served after the restart";
      continue;
    }
    EXPECT_EQ(*got.blocks[i], value_of(acked[i])) << acked[i];
    ++served;
  }
  EXPECT_EQ(served, acked.size());
}

TEST(ems_pool, servers_join_and_leave_the_ring_while_clients_run) {
  pool_cluster c(ub_planes, 2, "");
  ASSERT_TRUE(c.wait_ring({"mp_server-0", "mp_server-1"}));
  load_driver load(*c.client);
  ASSERT_TRUE(load.wait_acked(200));
  c.servers[0]->signal(SIGTERM); // leaves cleanly: the ring drops it at once
  ASSERT_TRUE(c.servers[0]->wait(10s));
  ASSERT_TRUE(c.wait_ring({"mp_server-1"}));
  ASSERT_TRUE(load.wait_acked(100));
  c.start_server(0); // joins again with what its SSD tier kept
  ASSERT_TRUE(c.wait_ring({"mp_server-0", "mp_server-1"}));
  ASSERT_TRUE(load.wait_acked(100));
  load.finish();
  EXPECT_EQ(load.wrong, 0) << "a read returned bytes of another key or version";
  // Bounded misses: only reads that raced a ring change may miss.
  EXPECT_LT(load.read_misses, load.reads / 2);
  const auto acked = load.acked_keys();
  auto got = c.client->get("load", acked);
  for (size_t i = 0; i < acked.size(); ++i) {
    ASSERT_TRUE(got.blocks[i].has_value()) << acked[i];
    EXPECT_EQ(*got.blocks[i], value_of(acked[i]));
  }
}

TEST(ems_pool, models_are_evicted_whole_least_recently_used_first) {
  // 3 MiB for models over the pool: two 1.25 MiB models fit, a third evicts the oldest whole.
  pool_cluster c(ub_planes, 2, "[ems.quotas]\nmodels = 3145728\n");
  ASSERT_TRUE(c.wait_ring({"mp_server-0", "mp_server-1"}));
  auto store_model = [&](const std::string& name) {
    std::vector<std::string> keys;
    std::vector<std::vector<std::byte>> values;
    for (int i = 0; i < 5; ++i) {
      keys.push_back(name + "/" + std::to_string(i));
      values.emplace_back(256 << 10, static_cast<std::byte>(i));
    }
    std::vector<ems::pool_put> items;
    for (size_t i = 0; i < keys.size(); ++i) items.push_back({keys[i], values[i]});
    for (auto& o : c.client->put("models", items)) EXPECT_TRUE(o.stored) << o.error;
    EXPECT_EQ(c.client->claim_model(name).what, ems::model_claim::state::fetch);
    const std::vector<std::byte> manifest(16, std::byte{1});
    c.client->register_model(name, "models", manifest, keys, 5 * (256 << 10), "");
    return keys;
  };
  auto present = [&](const std::vector<std::string>& keys) {
    size_t n = 0;
    for (bool b : c.client->exists("models", keys)) n += b;
    return n;
  };
  const auto a = store_model("a@1"), b = store_model("b@1");
  EXPECT_EQ(c.client->claim_model("a@1").what, ems::model_claim::state::ready); // a is newer now
  const auto d = store_model("d@1");
  // The controller's removes are asynchronous: wait (bounded) until b's blocks are gone.
  for (int i = 0; i < 200 && present(b) > 0; ++i) std::this_thread::yield();
  EXPECT_EQ(present(b), 0u) << "the least recently used model goes, whole";
  EXPECT_EQ(present(a), a.size());
  EXPECT_EQ(present(d), d.size());
  EXPECT_EQ(c.client->claim_model("b@1").what, ems::model_claim::state::fetch); // gone
}
