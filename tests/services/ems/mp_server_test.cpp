// An MP server over the inproc plane, with no processes or actors: the test is its client (and,
// for quotas, its controller) and speaks to it in messages. Every reply answers its request's
// id; refusals carry ems_errc codes per key.

#include "../../support/ask.hpp"
#include "../../support/inproc_cluster.hpp"
#include "../../support/probe_endpoint.hpp"
#include "../../support/role_host.hpp"
#include "services/ems/block_checksum.hpp"
#include "services/ems/mp_server.hpp"
#include "transport/shm_region.hpp"

#include <cstring>
#include <gtest/gtest.h>
#include <optional>

using namespace supernode;
using namespace std::chrono_literals;
namespace ems = supernode::services::ems;
namespace pr = supernode::services::protocol;
using pr::ems_errc;

namespace {

constexpr const char* tables = "[process.ems]\nroles = [\"mp_server\"]\n"
                               "[process.probe]\nroles = [\"probe\"]\n"
                               "[process.controller]\nroles = [\"mp_controller\"]\n"
                               "[ems]\ndram_bytes = 8388608\nssd_bytes = 268435456\n";
constexpr const char* server = "mp_server-0";

std::string value_of(const std::string& key, size_t bytes) {
  std::string v(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<char>(key.size() * 31 + key.back() + i * 7);
  return v;
}

struct server_bench {
  supernode::testing::inproc_cluster_file config{"mp-server-test", tables};
  supernode::testing::probe_endpoint client{config.file.cluster, "probe-0",
                                            [](transport::endpoint&) {}};
  // Stands in for the MP controller: ring views (and the quotas in them) count only from it.
  supernode::testing::probe_endpoint controller{config.file.cluster, "mp_controller-0",
                                                [](transport::endpoint&) {}};
  supernode::testing::role_host<ems::mp_server> host{
      config.file.cluster, server,
      std::make_shared<ems::mp_server>(config.file.cluster, server, config.file.serving.ems)};

  // Sends `request` under a fresh request id and waits for the reply that answers it.
  template<class Reply, class Request>
  std::optional<Reply> ask(Request request) {
    return ask_as<Reply>(client.ep, std::move(request));
  }
  template<class Reply, class Request>
  std::optional<Reply> ask_as(transport::endpoint& asker, Request request) {
    return supernode::testing::ask<Reply>(asker, server, std::move(request));
  }
  std::optional<pr::ems_put_reply> put(const std::string& ns, std::vector<std::string> keys,
                                       const std::vector<std::string>& values) {
    pr::ems_put p;
    p.ns = ns;
    p.keys = std::move(keys);
    std::vector<char> data;
    for (const auto& v : values) {
      p.sizes.push_back(v.size());
      data.insert(data.end(), v.begin(), v.end());
    }
    p.data = std::move(data);
    return ask<pr::ems_put_reply>(std::move(p));
  }
  void push_quota(const std::string& ns, uint64_t bytes, transport::endpoint& from) {
    pr::ems_ring_view v;
    v.version = 1;
    v.servers = {server};
    v.quotas = {{ns, bytes}};
    ASSERT_EQ(from.send("ems", server, transport::make_envelope(v)), transport::send_status::ok);
    // The server takes one sender's messages in order: its answer to this follows the view.
    ASSERT_TRUE(ask_as<pr::ems_list_reply>(from, pr::ems_list{0, ns}));
  }
};

} // namespace

TEST(mp_server, put_get_exists_remove_and_list_answer_through_messages) {
  server_bench b;
  const std::vector<std::string> keys = {"k-small", "k-large", "k-empty"};
  const std::vector<std::string> values = {value_of(keys[0], 100), value_of(keys[1], 40 << 10), ""};
  const auto stored = b.put("a", keys, values);
  ASSERT_TRUE(stored);
  ASSERT_EQ(stored->errors.size(), keys.size());
  for (const auto& e : stored->errors) EXPECT_TRUE(e.ok()) << e;

  // By value: sizes in request order, -1 for the miss, the hits' bytes back to back.
  const auto by_value =
      b.ask<pr::ems_get_reply>(pr::ems_get{0, "a", {keys[1], "absent", keys[0], keys[2]}, false});
  ASSERT_TRUE(by_value);
  EXPECT_EQ(by_value->sizes, (std::vector<int64_t>{40 << 10, -1, 100, 0}));
  EXPECT_EQ(by_value->offsets, (std::vector<int64_t>{-1, -1, -1, -1}));
  EXPECT_EQ(std::string(by_value->data.begin(), by_value->data.end()), values[1] + values[0]);

  // By reference: where each block lies in the server's region, with its checksum.
  const auto by_ref = b.ask<pr::ems_get_reply>(pr::ems_get{0, "a", {keys[0], keys[1]}, true});
  ASSERT_TRUE(by_ref);
  EXPECT_EQ(by_ref->region, ems::server_region_name(server));
  auto region = transport::shm_region::try_open(b.config.file.cluster.name, by_ref->region);
  ASSERT_TRUE(region);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_GE(by_ref->offsets[i], 0) << keys[i] << " is not in DRAM";
    ASSERT_EQ(by_ref->sizes[i], static_cast<int64_t>(values[i].size()));
    const auto* at = region->data() + by_ref->offsets[i];
    EXPECT_EQ(std::memcmp(at, values[i].data(), values[i].size()), 0) << keys[i];
    EXPECT_EQ(by_ref->checksums[i],
              ems::block_checksum("a", keys[i], std::as_bytes(std::span(values[i]))));
  }

  const auto present = b.ask<pr::ems_exists_reply>(pr::ems_exists{0, "a", {keys[0], "absent"}});
  ASSERT_TRUE(present);
  EXPECT_EQ(present->present, (std::vector<bool>{true, false}));
  const auto listed = b.ask<pr::ems_list_reply>(pr::ems_list{0, "a"});
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->keys, (std::vector<std::string>{"k-empty", "k-large", "k-small"}));
  const auto other = b.ask<pr::ems_list_reply>(pr::ems_list{0, "b"});
  ASSERT_TRUE(other);
  EXPECT_TRUE(other->keys.empty()) << "namespace b sees a's keys";

  const auto removed = b.ask<pr::ems_remove_reply>(pr::ems_remove{0, "a", {keys[0], "absent"}});
  ASSERT_TRUE(removed);
  EXPECT_EQ(removed->removed, 1u);
  const auto after = b.ask<pr::ems_list_reply>(pr::ems_list{0, "a"});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->keys, (std::vector<std::string>{"k-empty", "k-large"}));
}

TEST(mp_server, a_put_over_the_namespace_quota_fails_with_quota_exceeded) {
  server_bench b;
  // A client's ring view is refused: its quota would let it starve other namespaces.
  b.push_quota("small", 10, b.client.ep);
  b.push_quota("small", 1000, b.controller.ep);
  const auto first = b.put("small", {"fits"}, {value_of("fits", 600)});
  ASSERT_TRUE(first);
  ASSERT_EQ(first->errors.size(), 1u);
  EXPECT_TRUE(first->errors[0].ok()) << first->errors[0];
  const auto second =
      b.put("small", {"over", "also-fits"}, {value_of("over", 600), value_of("also-fits", 300)});
  ASSERT_TRUE(second);
  ASSERT_EQ(second->errors.size(), 2u);
  EXPECT_TRUE(second->errors[0].is(ems_errc::quota_exceeded)) << second->errors[0];
  EXPECT_TRUE(second->errors[1].ok()) << second->errors[1];
  // Nothing was evicted to make room, and another namespace is not limited.
  const auto left = b.ask<pr::ems_list_reply>(pr::ems_list{0, "small"});
  ASSERT_TRUE(left);
  EXPECT_EQ(left->keys, (std::vector<std::string>{"also-fits", "fits"}));
  const auto elsewhere = b.put("big", {"over"}, {value_of("over", 600)});
  ASSERT_TRUE(elsewhere);
  EXPECT_TRUE(elsewhere->errors.at(0).ok()) << elsewhere->errors.at(0);
  EXPECT_EQ(b.host.endpoint().rejected_messages().at("not_from_mp_controller"), 1u);
}

TEST(mp_server, a_malformed_put_fails_with_malformed_request) {
  server_bench b;
  // Two keys, one size: every key fails.
  pr::ems_put mismatched;
  mismatched.ns = "a";
  mismatched.keys = {"x", "y"};
  mismatched.sizes = {3};
  mismatched.data = std::vector<char>{'a', 'b', 'c'};
  const auto r = b.ask<pr::ems_put_reply>(mismatched);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->errors.size(), 2u);
  for (const auto& e : r->errors) EXPECT_TRUE(e.is(ems_errc::malformed_request)) << e;

  // A value running past the data: that key fails, the one before it is stored.
  pr::ems_put overrun;
  overrun.ns = "a";
  overrun.keys = {"fine", "past"};
  overrun.sizes = {2, 10};
  overrun.data = std::vector<char>{'o', 'k', 'z'};
  const auto o = b.ask<pr::ems_put_reply>(overrun);
  ASSERT_TRUE(o);
  ASSERT_EQ(o->errors.size(), 2u);
  EXPECT_TRUE(o->errors[0].ok()) << o->errors[0];
  EXPECT_TRUE(o->errors[1].is(ems_errc::malformed_request)) << o->errors[1];
  const auto listed = b.ask<pr::ems_list_reply>(pr::ems_list{0, "a"});
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->keys, (std::vector<std::string>{"fine"}));
}

TEST(mp_server, a_put_with_request_id_zero_is_stored_without_a_reply) {
  server_bench b;
  pr::ems_put p;
  p.ns = "a";
  p.keys = {"quiet"};
  p.sizes = {5};
  p.data = std::vector<char>{'h', 'e', 'l', 'l', 'o'};
  ASSERT_EQ(b.client.ep.send("ems", server, transport::make_envelope(p)),
            transport::send_status::ok);
  // Served in arrival order: the get after it finds it.
  const auto got = b.ask<pr::ems_get_reply>(pr::ems_get{0, "a", {"quiet"}, false});
  ASSERT_TRUE(got);
  EXPECT_EQ(std::string(got->data.begin(), got->data.end()), "hello");
}
