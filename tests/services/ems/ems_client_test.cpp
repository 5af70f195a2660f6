// The MP SDK against an MP controller and an MP server hosted in this process over the inproc
// plane (ems_pool_test runs them as processes): what is put comes back byte for byte, a miss is
// a miss, and once the server has left a put fails as unreachable and a get misses, never
// answering with wrong bytes.

#include "../../support/inproc_cluster.hpp"
#include "../../support/role_host.hpp"
#include "services/ems/mp_controller.hpp"
#include "services/ems/mp_server.hpp"
#include "services/ems/pool_session.hpp"

#include <gtest/gtest.h>
#include <memory>

using namespace supernode;
using namespace std::chrono_literals;
namespace ems = supernode::services::ems;
using supernode::services::protocol::ems_errc;
using supernode::testing::role_host;

namespace {

constexpr const char* tables = "[process.ems_controller]\nroles = [\"mp_controller\"]\n"
                               "[process.ems]\nroles = [\"mp_server\"]\n"
                               "[process.probe]\nroles = [\"probe\"]\n"
                               "[ems]\ndram_bytes = 8388608\nssd_bytes = 268435456\n"
                               "timeout_ms = 2000\n";

std::vector<std::byte> value_of(size_t bytes, unsigned seed) {
  std::vector<std::byte> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>(i * 13 + seed);
  return v;
}

struct pool_bench {
  supernode::testing::inproc_cluster_file config{"ems-client-test", tables};
  const transport::cluster_config& cluster = config.file.cluster;
  const ems::ems_config& ems_config = config.file.serving.ems;
  role_host<ems::mp_controller> controller{
      cluster, "mp_controller-0", std::make_shared<ems::mp_controller>(cluster, ems_config)};
  std::unique_ptr<role_host<ems::mp_server>> server = std::make_unique<role_host<ems::mp_server>>(
      cluster, "mp_server-0", std::make_shared<ems::mp_server>(cluster, "mp_server-0", ems_config));
  ems::pool_session session{cluster, "probe-0", 5, ems_config};
  ems::ems_client& client = session.client();
};

} // namespace

TEST(ems_client, put_then_get_returns_the_bytes_and_a_miss_is_nullopt) {
  pool_bench b;
  ASSERT_TRUE(b.client.wait_for_servers(10s));
  EXPECT_EQ(b.client.servers(), std::vector<std::string>{"mp_server-0"});
  const auto small = value_of(300, 1), large = value_of(100 << 10, 2);
  const std::vector<ems::pool_put> items = {{"small", small}, {"large", large}};
  for (const auto& o : b.client.put("ctx", items)) ASSERT_TRUE(o.stored) << o.error;

  const std::vector<std::string> keys = {"large", "missing", "small"};
  const auto got = b.client.get("ctx", keys);
  ASSERT_EQ(got.blocks.size(), 3u);
  ASSERT_TRUE(got.blocks[0]);
  EXPECT_EQ(*got.blocks[0], large);
  EXPECT_FALSE(got.blocks[1]) << "a key never put came back";
  ASSERT_TRUE(got.blocks[2]);
  EXPECT_EQ(*got.blocks[2], small);
  EXPECT_EQ(got.errors, 0u) << got.first_error;
  // The same key in another namespace is another block.
  const std::vector<std::string> small_key = {"small"};
  EXPECT_FALSE(b.client.get("other", small_key).blocks.at(0));
  EXPECT_EQ(b.client.exists("ctx", keys), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(b.client.list("ctx"), (std::vector<std::string>{"large", "small"}));
}

TEST(ems_client, once_the_server_left_puts_fail_as_unreachable_and_gets_miss) {
  pool_bench b;
  ASSERT_TRUE(b.client.wait_for_servers(10s));
  const auto value = value_of(4096, 3);
  const std::vector<ems::pool_put> items = {{"k", value}};
  ASSERT_TRUE(b.client.put("ctx", items).at(0).stored);

  b.server->endpoint().announce_leave("test over");
  b.server.reset();
  const auto outcomes = b.client.put("ctx", items);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_FALSE(outcomes[0].stored);
  EXPECT_TRUE(outcomes[0].error.is(ems_errc::server_unreachable)) << outcomes[0].error;
  EXPECT_STREQ(outcomes[0].error.name(), "pool_server_unreachable");
  EXPECT_TRUE(outcomes[0].error.retry_elsewhere());
  const std::vector<std::string> keys = {"k"};
  const auto got = b.client.get("ctx", keys);
  ASSERT_EQ(got.blocks.size(), 1u);
  EXPECT_FALSE(got.blocks[0]) << "bytes from a server that left";
}

TEST(ems_client, a_server_gone_without_a_word_fails_puts_as_unreachable_not_wrong_bytes) {
  pool_bench b;
  ASSERT_TRUE(b.client.wait_for_servers(10s));
  const auto value = value_of(4096, 4);
  const std::vector<ems::pool_put> items = {{"k", value}};
  ASSERT_TRUE(b.client.put("ctx", items).at(0).stored);

  // No leave announced: the client's ring still names the server when the calls go out.
  b.server.reset();
  const auto outcomes = b.client.put("ctx", items);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_FALSE(outcomes[0].stored);
  EXPECT_TRUE(outcomes[0].error.is(ems_errc::server_unreachable)) << outcomes[0].error;
  const std::vector<std::string> keys = {"k"};
  const auto got = b.client.get("ctx", keys);
  ASSERT_EQ(got.blocks.size(), 1u);
  EXPECT_FALSE(got.blocks[0]) << "bytes from a server that is gone";
  EXPECT_GT(got.errors, 0u) << "a read from a dead server counted as a plain miss";
}
