// EMS server foundation: the consistent-hash ring (determinism, balance, minimal movement), the
// DRAM arena allocator, and the block store's tiers, quotas, isolation, checksums and restart.
// Every store test gets its own temp folder; nothing sleeps.

#include "services/ems/block_checksum.hpp"
#include "services/ems/block_store.hpp"
#include "services/ems/hash_ring.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace supernode::services::ems;
namespace protocol = supernode::services::protocol;
namespace fs = std::filesystem;

namespace {

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> out;
  for (char c : s) out.push_back(static_cast<std::byte>(c));
  return out;
}

std::vector<std::byte> block(size_t size, int seed) {
  std::vector<std::byte> out(size);
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>((i * 31 + seed * 7) & 0xff);
  return out;
}

// Appended rather than "k" + to_string: GCC 12 raises a false -Wrestrict on the latter at -O3.
std::string key_name(int i) {
  std::string s = "k";
  s += std::to_string(i);
  return s;
}

std::map<std::string, std::string> owner_map(const hash_ring& ring, int keys) {
  std::map<std::string, std::string> out;
  for (int i = 0; i < keys; ++i) out[key_name(i)] = ring.owner("ctx", key_name(i));
  return out;
}

hash_ring ring_of(std::vector<std::string> names, int32_t vnodes = 64) {
  hash_ring ring(vnodes);
  for (const auto& n : names) ring.add_server(n);
  return ring;
}

void flip_byte_on_disk(const fs::path& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(at);
  f.write(&c, 1);
}

// Bytes a block of `data` bytes takes on the SSD tier (header, ns, key, data).
uint64_t file_bytes(const std::string& ns, const std::string& key, size_t data) {
  return 48 + ns.size() + key.size() + data;
}

} // namespace

// ---- hash ring -------------------------------------------------------------------------------

TEST(EmsHashRing, HashIsStableAcrossBuilds) {
  // Golden values, cross-checked with an independent Python FNV-1a + splitmix64: placement must
  // not change with compiler, flags or platform.
  EXPECT_EQ(stable_hash(""), stable_hash(std::string()));
  EXPECT_EQ(key_hash("ns", "key"), key_hash(std::string("ns"), std::string("key")));
  EXPECT_NE(key_hash("ab", "c"), key_hash("a", "bc"));
  EXPECT_EQ(stable_hash("ems"), 0x3b1952a21b010514ull);
  EXPECT_EQ(key_hash("ns", "key"), 0x524197bfc6f9965full);
}

TEST(EmsHashRing, DeterministicWhateverTheJoinOrder) {
  auto a = ring_of({"s0", "s1", "s2", "s3"});
  auto b = ring_of({"s3", "s1", "s0", "s2"});
  EXPECT_EQ(owner_map(a, 2000), owner_map(b, 2000));
  for (int i = 0; i < 200; ++i)
    EXPECT_EQ(a.owners("ctx", key_name(i), 3), b.owners("ctx", key_name(i), 3));
}

TEST(EmsHashRing, MembershipErrorsAndVersion) {
  hash_ring ring(8);
  EXPECT_EQ(ring.version(), 0u);
  try {
    (void)ring.owner("ns", "k");
    ADD_FAILURE() << "owner on an empty ring did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "ring has no server");
  }
  EXPECT_THROW((void)ring.owners("ns", "k", 2), std::runtime_error);
  ring.add_server("a");
  ring.add_server("b");
  EXPECT_EQ(ring.version(), 2u);
  try {
    ring.add_server("a");
    ADD_FAILURE() << "duplicate add did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'a'"), std::string::npos) << e.what();
  }
  try {
    ring.remove_server("zz");
    ADD_FAILURE() << "unknown remove did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'zz'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ring.add_server(""), std::invalid_argument);
  EXPECT_THROW(hash_ring(0), std::invalid_argument);
  EXPECT_EQ(ring.version(), 2u) << "failed changes must not bump the version";
  ring.remove_server("a");
  EXPECT_EQ(ring.version(), 3u);
  EXPECT_EQ(ring.servers(), std::vector<std::string>{"b"});
  EXPECT_EQ(ring.owner("ns", "anything"), "b");
}

TEST(EmsHashRing, BalancedOverFourServers) {
  auto ring = ring_of({"mp-0", "mp-1", "mp-2", "mp-3"});
  std::map<std::string, int> share;
  const int keys = 10000;
  for (int i = 0; i < keys; ++i) ++share[ring.owner("ctx", key_name(i))];
  ASSERT_EQ(share.size(), 4u);
  int most = 0;
  for (const auto& [server, n] : share) most = std::max(most, n);
  const double mean = keys / 4.0;
  EXPECT_LT(most / mean, 1.3) << ring.describe();
}

TEST(EmsHashRing, AddingAServerMovesAboutOneNthToIt) {
  auto ring = ring_of({"mp-0", "mp-1", "mp-2", "mp-3"});
  const int keys = 10000;
  const auto before = owner_map(ring, keys);
  ring.add_server("mp-4");
  const auto after = owner_map(ring, keys);
  int moved = 0;
  for (const auto& [key, owner] : before) {
    if (after.at(key) == owner) continue;
    ++moved;
    EXPECT_EQ(after.at(key), "mp-4") << key << " moved between old servers";
  }
  const double fraction = double(moved) / keys;
  EXPECT_GT(fraction, 0.5 / 5);
  EXPECT_LT(fraction, 1.5 / 5);
}

TEST(EmsHashRing, RemovingAServerMovesOnlyItsKeys) {
  auto ring = ring_of({"mp-0", "mp-1", "mp-2", "mp-3"});
  const int keys = 10000;
  const auto before = owner_map(ring, keys);
  ring.remove_server("mp-2");
  const auto after = owner_map(ring, keys);
  int moved = 0;
  for (const auto& [key, owner] : before) {
    if (owner == "mp-2") {
      ++moved;
      EXPECT_NE(after.at(key), "mp-2");
    } else {
      EXPECT_EQ(after.at(key), owner) << key << " moved though its server stayed";
    }
  }
  const double fraction = double(moved) / keys;
  EXPECT_GT(fraction, 0.5 / 4);
  EXPECT_LT(fraction, 1.5 / 4);
}

TEST(EmsHashRing, OwnersAreDistinctAndReplicasTakeOver) {
  auto ring = ring_of({"a", "b", "c", "d"});
  for (int i = 0; i < 500; ++i) {
    const auto o = ring.owners("ctx", key_name(i), 3);
    ASSERT_EQ(o.size(), 3u);
    EXPECT_EQ(std::set<std::string>(o.begin(), o.end()).size(), 3u);
    EXPECT_EQ(o[0], ring.owner("ctx", key_name(i)));
    EXPECT_EQ(ring.owners("ctx", key_name(i), 9).size(), 4u) << "n is capped at the servers";
    // The first replica is who owns the key once the owner leaves: no data has to move to it.
    auto smaller = ring;
    smaller.remove_server(o[0]);
    EXPECT_EQ(smaller.owner("ctx", key_name(i)), o[1]);
  }
}

// ---- DRAM arena ------------------------------------------------------------------------------

TEST(EmsArena, BlocksAre64ByteAligned) {
  dram_arena arena(64 * 100, false);
  for (size_t size : {1, 63, 64, 65, 100, 0, 1000}) {
    auto off = arena.allocate(size);
    ASSERT_TRUE(off) << size;
    EXPECT_EQ(*off % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.at(*off)) % 64, 0u);
    EXPECT_EQ(arena.allocated_size(*off), std::max<size_t>((size + 63) / 64 * 64, 64));
  }
}

TEST(EmsArena, FragmentationThenCoalescing) {
  dram_arena arena(64 * 10, false);
  std::vector<size_t> offs;
  for (int i = 0; i < 10; ++i) offs.push_back(*arena.allocate(64));
  EXPECT_FALSE(arena.allocate(1));
  for (int i = 0; i < 10; i += 2) arena.release(offs[i]);
  EXPECT_EQ(arena.free_bytes(), 320u);
  EXPECT_EQ(arena.free_block_count(), 5u);
  EXPECT_EQ(arena.largest_free_block(), 64u);
  EXPECT_FALSE(arena.allocate(128)) << "half free, but in pieces of 64";
  // Freeing 1 joins 0..2; freeing 3 then joins that with 4.
  arena.release(offs[1]);
  EXPECT_EQ(arena.largest_free_block(), 192u);
  arena.release(offs[3]);
  EXPECT_EQ(arena.largest_free_block(), 320u);
  EXPECT_EQ(arena.free_block_count(), 3u);
  for (int i = 5; i < 10; i += 2) arena.release(offs[i]);
  EXPECT_EQ(arena.free_block_count(), 1u);
  EXPECT_EQ(arena.used_bytes(), 0u);
  auto whole = arena.allocate(640);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, 0u);
}

TEST(EmsArena, ExhaustionAndBadRelease) {
  dram_arena arena(1000, false); // rounds down to 960
  EXPECT_EQ(arena.capacity(), 960u);
  EXPECT_FALSE(arena.allocate(961));
  auto a = arena.allocate(900);
  ASSERT_TRUE(a);
  EXPECT_FALSE(arena.allocate(64));
  EXPECT_THROW(arena.release(*a + 64), std::invalid_argument);
  arena.release(*a);
  EXPECT_THROW(arena.release(*a), std::invalid_argument) << "double release";
  EXPECT_TRUE(arena.allocate(960));
}

TEST(EmsArena, HugePagesFallBackSilently) {
  dram_arena arena(4 << 20, true); // huge pages when the machine has them, plain otherwise
  auto off = arena.allocate(1 << 20);
  ASSERT_TRUE(off);
  arena.at(*off)[0] = std::byte{1}; // the mapping is usable either way
}

// ---- block store -----------------------------------------------------------------------------

class EmsStore : public ::testing::Test {
protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "ems_store_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  block_store_options options(size_t dram, uint64_t ssd = 1 << 20, double watermark = 1.0) {
    block_store_options o;
    o.dram_bytes = dram;
    o.dram_high_watermark = watermark;
    o.ssd_dir = dir_;
    o.ssd_bytes = ssd;
    o.huge_pages = false;
    return o;
  }
  size_t files_with(const std::string& suffix) const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().ends_with(suffix)) ++n;
    return n;
  }
  fs::path dir_;
};

TEST_F(EmsStore, PutGetRoundTrip) {
  block_store store(options(1 << 16));
  const auto data = block(1000, 1);
  const auto r = store.put("ctx", "a", data);
  EXPECT_TRUE(r.stored);
  EXPECT_TRUE(r.persisted);
  EXPECT_TRUE(r.in_dram);
  EXPECT_TRUE(r.error.ok());
  EXPECT_TRUE(store.exists("ctx", "a"));
  EXPECT_EQ(store.get("ctx", "a"), data);
  EXPECT_EQ(store.stats().dram_hits, 1u);
  EXPECT_EQ(store.stats().dram_bytes, 1000u);
  EXPECT_EQ(store.stats().ssd_bytes, file_bytes("ctx", "a", 1000));

  const auto newer = block(10, 2); // overwrite with a different size
  EXPECT_TRUE(store.put("ctx", "a", newer).stored);
  EXPECT_EQ(store.get("ctx", "a"), newer);
  EXPECT_EQ(store.namespace_bytes("ctx"), 10u);
  EXPECT_EQ(store.stats().ssd_blocks, 1u);

  EXPECT_TRUE(store.put("ctx", "empty", {}).stored);
  EXPECT_EQ(store.get("ctx", "empty"), std::vector<std::byte>{});

  EXPECT_TRUE(store.remove("ctx", "a"));
  EXPECT_FALSE(store.remove("ctx", "a"));
  EXPECT_FALSE(store.exists("ctx", "a"));
  EXPECT_EQ(store.get("ctx", "a"), std::nullopt);
  EXPECT_EQ(store.stats().misses, 1u);
  EXPECT_EQ(files_with(".blk"), 1u) << "only 'empty' is left on disk";
  EXPECT_EQ(files_with(".tmp"), 0u);
  EXPECT_NE(store.describe().find("plain pages"), std::string::npos) << store.describe();
}

TEST_F(EmsStore, TheSsdTierIsPrivateFoldersAndFiles) {
  // Made by the store: 0700 folders (missing parents too), 0600 block files.
  auto o = options(1 << 16);
  o.ssd_dir = dir_ / "ems" / "mp_server-0";
  {
    block_store store(o);
    ASSERT_TRUE(store.put("ctx", "a", block(100, 1)).persisted);
    const auto file = store.ssd_path_for_test("ctx", "a");
    ASSERT_TRUE(file);
    EXPECT_EQ(fs::status(*file).permissions(), fs::perms::owner_read | fs::perms::owner_write);
    EXPECT_EQ(fs::status(o.ssd_dir).permissions(), fs::perms::owner_all);
    EXPECT_EQ(fs::status(dir_ / "ems").permissions(), fs::perms::owner_all);
  }
  // A folder anyone may write to is refused, naming it and its mode.
  fs::permissions(o.ssd_dir, fs::perms::all);
  try {
    block_store store(o);
    ADD_FAILURE() << "a world-writable SSD tier was used";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(o.ssd_dir.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mode 0777"), std::string::npos) << e.what();
  }
}

TEST_F(EmsStore, BatchForms) {
  block_store store(options(1 << 16));
  const auto x = block(100, 1), y = block(200, 2);
  std::vector<put_item> items{{"x", x}, {"y", y}};
  const auto results = store.put_many("ctx", items);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0] && results[1]);
  std::vector<std::string> keys{"y", "missing", "x"};
  const auto got = store.get_many("ctx", keys);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], y);
  EXPECT_EQ(got[1], std::nullopt);
  EXPECT_EQ(got[2], x);
}

TEST_F(EmsStore, DramEvictionIsLeastRecentlyUsedFirst) {
  // 640-byte arena at a 0.5 watermark: five 64-byte blocks fit.
  block_store store(options(640, 1 << 20, 0.5));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store.put("ctx", key_name(i), block(64, i)).in_dram);
  ASSERT_TRUE(store.get("ctx", "k0")); // k0 becomes most recent; k1 is now the oldest
  ASSERT_TRUE(store.put("ctx", "k5", block(64, 5)).in_dram);
  EXPECT_EQ(store.locate("ctx", "k1"), (block_location{false, true}));
  for (const char* k : {"k0", "k2", "k3", "k4", "k5"})
    EXPECT_EQ(store.locate("ctx", k), (block_location{true, true})) << k;
  EXPECT_EQ(store.stats().evictions_dram_to_ssd, 1u);

  // k1 comes back from SSD, verified, and pushes out the next oldest (k2).
  EXPECT_EQ(store.get("ctx", "k1"), block(64, 1));
  EXPECT_EQ(store.stats().ssd_hits, 1u);
  EXPECT_TRUE(store.locate("ctx", "k1").in_dram);
  EXPECT_FALSE(store.locate("ctx", "k2").in_dram);
  EXPECT_EQ(store.stats().evictions_dram_to_ssd, 2u);
  EXPECT_EQ(store.stats().dram_blocks, 5u);
  EXPECT_LE(store.arena().used_bytes(), 320u) << "the watermark holds";
}

TEST_F(EmsStore, FragmentedArenaEvictsUntilARunFits) {
  block_store store(options(640)); // watermark 1.0: only fragmentation forces evictions
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(store.put("ctx", key_name(i), block(64, i)).in_dram);
  for (int i = 1; i < 10; i += 2) ASSERT_TRUE(store.remove("ctx", key_name(i)));
  // 320 bytes free in 64-byte holes: a 128-byte block fits nowhere. Evicting the LRU block
  // (k0) frees the slot next to k1's hole, and the two coalesce into a 128-byte run: one
  // eviction is enough.
  ASSERT_TRUE(store.put("ctx", "big", block(128, 9)).in_dram);
  EXPECT_FALSE(store.locate("ctx", "k0").in_dram);
  EXPECT_TRUE(store.locate("ctx", "k2").in_dram);
  EXPECT_EQ(store.stats().evictions_dram_to_ssd, 1u);
  // Larger than the arena: persisted and served, just never cached.
  const auto huge = block(4096, 3);
  const auto r = store.put("ctx", "huge", huge);
  EXPECT_TRUE(r.stored && r.persisted);
  EXPECT_FALSE(r.in_dram);
  EXPECT_EQ(store.get("ctx", "huge"), huge);
  EXPECT_EQ(store.stats().evictions_dram_to_ssd, 1u) << "a block that can never fit evicts nothing";
}

TEST_F(EmsStore, SsdDeletesLeastRecentlyUsedAtItsThreshold) {
  const uint64_t one = file_bytes("ctx", "k0", 100);
  block_store store(options(1 << 16, 3 * one));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store.put("ctx", key_name(i), block(100, i)));
  ASSERT_TRUE(store.get("ctx", "k0"));
  const auto k1_file = *store.ssd_path_for_test("ctx", "k1");
  ASSERT_TRUE(store.put("ctx", "k3", block(100, 3)));
  EXPECT_FALSE(store.exists("ctx", "k1"));
  EXPECT_FALSE(fs::exists(k1_file));
  for (const char* k : {"k0", "k2", "k3"}) EXPECT_TRUE(store.exists("ctx", k)) << k;
  EXPECT_EQ(store.stats().ssd_deletions, 1u);
  EXPECT_EQ(store.stats().ssd_bytes, 3 * one);
  EXPECT_EQ(store.stats().dram_blocks, 3u) << "a deleted block leaves DRAM too";

  const auto r = store.put("ctx", "too-big", block(3 * one, 0));
  EXPECT_FALSE(r.stored);
  EXPECT_TRUE(r.error.is(protocol::ems_errc::too_large)) << r.error.str();
  EXPECT_NE(r.error.message.find("capacity"), std::string::npos) << r.error.str();
  EXPECT_EQ(store.stats().ssd_deletions, 1u);
}

TEST_F(EmsStore, QuotaRejectsAndEvictsNothingOfAnotherNamespace) {
  block_store store(options(640, 1 << 20, 0.5));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store.put("tenant-b", key_name(i), block(64, i)));
  store.set_quota("tenant-a", 200);
  EXPECT_EQ(store.quota("tenant-a"), 200u);
  ASSERT_TRUE(store.put("tenant-a", "x", block(150, 1)));
  const auto r = store.put("tenant-a", "y", block(100, 2));
  EXPECT_FALSE(r.stored);
  EXPECT_FALSE(r.persisted);
  for (const char* part : {"'tenant-a'", "200", "100"})
    EXPECT_NE(r.error.message.find(part), std::string::npos) << r.error.str() << " lacks " << part;
  EXPECT_TRUE(r.error.is(protocol::ems_errc::quota_exceeded)) << r.error.str();
  EXPECT_FALSE(store.exists("tenant-a", "y"));
  EXPECT_EQ(store.stats().rejected_puts, 1u);
  // tenant-a's accepted put did push tenant-b out of DRAM (shared arena), but the rejected one
  // touched nothing: tenant-b keeps every block, and nothing more left DRAM.
  const auto evictions = store.stats().evictions_dram_to_ssd;
  const auto in_dram = store.stats().dram_blocks;
  EXPECT_FALSE(store.put("tenant-a", "z", block(51, 3)).stored);
  EXPECT_EQ(store.stats().evictions_dram_to_ssd, evictions);
  EXPECT_EQ(store.stats().dram_blocks, in_dram);
  EXPECT_EQ(store.keys("tenant-b").size(), 5u);
  // Replacing counts only the difference, and clearing the quota lifts the limit.
  EXPECT_TRUE(store.put("tenant-a", "x", block(200, 4)).stored);
  EXPECT_EQ(store.namespace_bytes("tenant-a"), 200u);
  store.clear_quota("tenant-a");
  EXPECT_TRUE(store.put("tenant-a", "y", block(100, 2)).stored);
}

TEST_F(EmsStore, NamespacesCannotSeeEachOther) {
  block_store store(options(1 << 16));
  ASSERT_TRUE(store.put("alice", "shared-name", bytes_of("alice's")));
  ASSERT_TRUE(store.put("bob", "shared-name", bytes_of("bob's")));
  ASSERT_TRUE(store.put("alice", "only-alice", bytes_of("secret")));
  EXPECT_EQ(store.get("alice", "shared-name"), bytes_of("alice's"));
  EXPECT_EQ(store.get("bob", "shared-name"), bytes_of("bob's"));
  EXPECT_EQ(store.get("bob", "only-alice"), std::nullopt);
  EXPECT_FALSE(store.exists("bob", "only-alice"));
  EXPECT_FALSE(store.remove("bob", "only-alice"));
  EXPECT_EQ(store.keys("alice"), (std::vector<std::string>{"only-alice", "shared-name"}));
  EXPECT_EQ(store.keys("bob"), std::vector<std::string>{"shared-name"});
  EXPECT_TRUE(store.keys("carol").empty());
  EXPECT_TRUE(store.remove("bob", "shared-name"));
  EXPECT_EQ(store.get("alice", "shared-name"), bytes_of("alice's"));
  // ("ab", "c") and ("a", "bc") are different blocks.
  ASSERT_TRUE(store.put("ab", "c", bytes_of("1")));
  ASSERT_TRUE(store.put("a", "bc", bytes_of("2")));
  EXPECT_EQ(store.get("ab", "c"), bytes_of("1"));
  EXPECT_EQ(store.get("a", "bc"), bytes_of("2"));
}

TEST_F(EmsStore, CorruptSsdFileIsAMissNeverWrongData) {
  block_store store(options(640, 1 << 20, 0.5));
  ASSERT_TRUE(store.put("ctx", "victim", block(64, 7)));
  const auto path = *store.ssd_path_for_test("ctx", "victim");
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store.put("ctx", key_name(i), block(64, i)));
  ASSERT_EQ(store.locate("ctx", "victim"), (block_location{false, true}));
  flip_byte_on_disk(path, static_cast<std::streamoff>(fs::file_size(path)) - 10);
  EXPECT_EQ(store.get("ctx", "victim"), std::nullopt);
  EXPECT_EQ(store.stats().corrupt_blocks, 1u);
  EXPECT_EQ(store.stats().misses, 1u);
  EXPECT_FALSE(store.exists("ctx", "victim")) << "the bad copy is dropped";
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(store.get("ctx", "victim"), std::nullopt);
  EXPECT_EQ(store.stats().corrupt_blocks, 1u);
}

TEST_F(EmsStore, CorruptDramCopyIsNeverServed) {
  block_store store(options(1 << 16));
  const auto data = block(300, 5);
  ASSERT_TRUE(store.put("ctx", "a", data));
  ASSERT_TRUE(store.corrupt_dram_copy_for_test("ctx", "a"));
  // The DRAM copy is a miss; the block's verified SSD copy serves instead.
  EXPECT_EQ(store.get("ctx", "a"), data);
  EXPECT_EQ(store.stats().corrupt_blocks, 1u);
  EXPECT_EQ(store.stats().dram_hits, 0u);
  EXPECT_EQ(store.stats().ssd_hits, 1u);
  EXPECT_TRUE(store.locate("ctx", "a").in_dram) << "re-cached from the good copy";
  EXPECT_EQ(store.get("ctx", "a"), data);
  EXPECT_EQ(store.stats().dram_hits, 1u);

  // Both copies bad: a plain miss.
  ASSERT_TRUE(store.put("ctx", "b", data));
  ASSERT_TRUE(store.corrupt_dram_copy_for_test("ctx", "b"));
  flip_byte_on_disk(*store.ssd_path_for_test("ctx", "b"), 60);
  EXPECT_EQ(store.get("ctx", "b"), std::nullopt);
  EXPECT_EQ(store.stats().corrupt_blocks, 3u);
  EXPECT_FALSE(store.exists("ctx", "b"));
}

TEST_F(EmsStore, RestartServesEveryPersistedBlock) {
  std::map<std::pair<std::string, std::string>, std::vector<std::byte>> written;
  {
    block_store store(options(1024, 1 << 20, 0.9));
    for (int i = 0; i < 40; ++i) {
      const std::string ns = i % 2 ? "odd" : "even";
      auto data = block(50 + i * 3, i);
      ASSERT_TRUE(store.put(ns, key_name(i), data).persisted);
      written[{ns, key_name(i)}] = std::move(data);
    }
    ASSERT_TRUE(store.put("even", key_name(0), block(7, 99)).persisted); // an overwrite
    written[{"even", key_name(0)}] = block(7, 99);
    ASSERT_TRUE(store.remove("odd", key_name(1)));
    written.erase({"odd", key_name(1)});
  }
  block_store store(options(1024, 1 << 20, 0.9));
  EXPECT_EQ(store.stats().ssd_blocks, written.size());
  EXPECT_EQ(store.stats().corrupt_blocks, 0u);
  EXPECT_EQ(store.keys("odd").size() + store.keys("even").size(), written.size());
  for (const auto& [id, data] : written) EXPECT_EQ(store.get(id.first, id.second), data);
  EXPECT_EQ(store.get("odd", key_name(1)), std::nullopt);
}

TEST_F(EmsStore, SigkilledServerRebuildsEveryAcknowledgedBlock) {
  int acked[2];
  ASSERT_EQ(::pipe(acked), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(acked[0]);
    block_store store(options(4096));
    for (int i = 0; i < 20; ++i) {
      if (!store.put("ctx", key_name(i), block(200, i)).persisted) ::_exit(2);
      const char one = 1;
      if (::write(acked[1], &one, 1) != 1) ::_exit(3);
    }
    ::raise(SIGKILL); // no destructor, no flush: only what put made durable survives
    ::_exit(4);
  }
  ::close(acked[1]);
  int acks = 0;
  char c;
  while (::read(acked[0], &c, 1) == 1) ++acks;
  ::close(acked[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  ASSERT_EQ(acks, 20);
  block_store store(options(4096));
  for (int i = 0; i < acks; ++i) EXPECT_EQ(store.get("ctx", key_name(i)), block(200, i)) << i;
}

TEST_F(EmsStore, RestartSkipsHalfWrittenAndCorruptFiles) {
  {
    block_store store(options(1 << 16));
    ASSERT_TRUE(store.put("ctx", "good", block(500, 1)));
    ASSERT_TRUE(store.put("ctx", "torn", block(500, 2)));
    ASSERT_TRUE(store.put("ctx", "flipped", block(500, 3)));
    const auto torn = *store.ssd_path_for_test("ctx", "torn");
    fs::resize_file(torn, fs::file_size(torn) - 100);
    flip_byte_on_disk(*store.ssd_path_for_test("ctx", "flipped"), 300);
    // A put killed between write and rename leaves its temp file behind.
    std::ofstream(dir_ / "0123456789abcdef.blk.tmp", std::ios::binary) << "EMSBLK01 half";
    std::ofstream(dir_ / "notes.txt") << "not a block";
  }
  block_store store(options(1 << 16));
  EXPECT_EQ(store.get("ctx", "good"), block(500, 1));
  EXPECT_FALSE(store.exists("ctx", "torn"));
  EXPECT_FALSE(store.exists("ctx", "flipped"));
  EXPECT_EQ(store.stats().corrupt_blocks, 2u);
  EXPECT_EQ(store.stats().ssd_blocks, 1u);
  EXPECT_EQ(files_with(".tmp"), 0u) << "the temp file is deleted";
  EXPECT_EQ(files_with(".blk"), 1u) << "corrupt files are deleted";
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt")) << "files that are not ours stay";
}

TEST_F(EmsStore, RestartKeepsPutOrderForLru) {
  const uint64_t one = file_bytes("ctx", "k0", 100);
  {
    block_store store(options(1 << 16, 3 * one));
    for (int i : {2, 0, 1}) ASSERT_TRUE(store.put("ctx", key_name(i), block(100, i)));
  }
  block_store store(options(1 << 16, 3 * one));
  ASSERT_TRUE(store.put("ctx", "k3", block(100, 3)));
  EXPECT_FALSE(store.exists("ctx", "k2")) << "the oldest put goes first after a restart too";
  EXPECT_TRUE(store.exists("ctx", "k0"));
  EXPECT_TRUE(store.exists("ctx", "k1"));
}

TEST_F(EmsStore, RejectsBadOptions) {
  auto o = options(1024);
  o.dram_high_watermark = 0;
  EXPECT_THROW(block_store{o}, std::invalid_argument);
  o = options(1024);
  o.ssd_dir.clear();
  EXPECT_THROW(block_store{o}, std::invalid_argument);
}

TEST_F(EmsStore, IdenticalBlocksAreStoredOnce) {
  block_store store(options(1 << 16));
  const auto data = block(3000, 5);
  ASSERT_TRUE(store.put("ctx", "a", data).stored);
  const auto path = store.ssd_path_for_test("ctx", "a");
  ASSERT_TRUE(path);
  const auto written = fs::last_write_time(*path);
  const auto seq_before = store.stats().ssd_bytes;
  // The same bytes again (two prefills racing to store one prefix): no second write.
  EXPECT_TRUE(store.put("ctx", "a", data).stored);
  EXPECT_EQ(fs::last_write_time(*path), written);
  EXPECT_EQ(store.stats().ssd_bytes, seq_before);
  EXPECT_EQ(store.get("ctx", "a"), data);
}

TEST_F(EmsStore, ReferencesPointIntoTheArenaAndMatchTheChecksum) {
  // The MP server's shared region: the arena carves memory it does not own.
  struct alignas(64) shared_region {
    std::byte bytes[1 << 16];
  };
  auto memory = std::make_unique<shared_region>();
  const std::span<std::byte> region(memory->bytes);
  auto o = options(0);
  o.dram_memory = region;
  block_store store(o);
  const auto data = block(5000, 9);
  ASSERT_TRUE(store.put("ctx", "r", data).in_dram);
  auto ref = store.get_ref("ctx", "r");
  ASSERT_TRUE(ref && ref->offset);
  ASSERT_LE(*ref->offset + ref->size, region.size());
  const std::vector<std::byte> copy(region.begin() + *ref->offset,
                                    region.begin() + *ref->offset + ref->size);
  EXPECT_EQ(copy, data);
  EXPECT_EQ(block_checksum("ctx", "r", copy), ref->checksum);
  EXPECT_NE(block_checksum("ctx", "other", copy), ref->checksum); // the key is covered too
  EXPECT_FALSE(store.get_ref("ctx", "absent"));
}

TEST(EmsChecksum, CoversEveryByteNamespaceAndKey) {
  auto data = block(1027, 3);
  const uint64_t base = block_checksum("ns", "key", data);
  EXPECT_EQ(block_checksum("ns", "key", data), base);
  EXPECT_NE(block_checksum("n", "skey", data), base);
  for (size_t i : {size_t{0}, size_t{31}, size_t{32}, size_t{1000}, size_t{1026}}) {
    auto flipped = data;
    flipped[i] ^= std::byte{1};
    EXPECT_NE(block_checksum("ns", "key", flipped), base) << i;
  }
  EXPECT_NE(block_checksum("ns", "key", std::span(data).first(1026)), base);
}
