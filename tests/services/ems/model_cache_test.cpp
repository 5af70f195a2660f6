// EMS model caching: the bandwidth-capped object store (errors, a cap that is a lower bound and is
// shared by threads and processes), model folders cut into pool blocks (versions, coverage,
// manifests) and the model cache over an in-memory pool: byte-identical loads, one fetch for
// eight concurrent instances, per-block fallback for corrupt or missing blocks and a full
// fallback when the pool is unreachable. Every test gets its own temp folder; nothing sleeps to
// synchronise (the only waits are the cap's own, measured as lower bounds).

#include "services/ems/model_blocks.hpp"
#include "services/ems/model_cache.hpp"
#include "services/ems/object_store.hpp"
#include "services/ems/pool_client.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace supernode::services::ems;
namespace fs = std::filesystem;
namespace protocol = supernode::services::protocol;

namespace {

// The pool as the model cache sees it, in memory: batch put/get/exists and the controller's
// one-fetcher claim (first claimant fetches, the others wait for its register_model; a failed
// registration passes the claim on). Hooks damage blocks, reject puts or cut the pool off.
class fake_pool : public pool_client {
public:
  std::vector<pool_put_outcome> put(const std::string& ns,
                                    std::span<const pool_put> items) override {
    std::lock_guard lock(mutex_);
    ++put_calls_;
    std::vector<pool_put_outcome> out;
    for (const auto& item : items) {
      if (unreachable_ || put_budget_ == 0) {
        out.push_back(
            {false, {protocol::ems_errc::server_unreachable, "fake pool rejects " + item.key}});
        continue;
      }
      if (failing_puts_ > 0) {
        --failing_puts_;
        out.push_back({false, {put_failure_, "fake pool fails the put of " + item.key}});
        continue;
      }
      if (put_budget_ > 0) --put_budget_;
      blocks_[ns][item.key].assign(item.data.begin(), item.data.end());
      out.push_back({true, {}});
    }
    return out;
  }

  pool_get_outcome get(const std::string& ns, std::span<const std::string> keys) override {
    std::lock_guard lock(mutex_);
    if (unreachable_) throw std::runtime_error("fake pool unreachable");
    pool_get_outcome out;
    for (const auto& key : keys) {
      const auto it = blocks_[ns].find(key);
      if (it == blocks_[ns].end()) {
        out.blocks.push_back(std::nullopt);
      } else {
        out.blocks.push_back(it->second);
        bytes_served_ += it->second.size();
      }
    }
    return out;
  }

  std::vector<bool> exists(const std::string& ns, std::span<const std::string> keys) override {
    std::lock_guard lock(mutex_);
    if (unreachable_) throw std::runtime_error("fake pool unreachable");
    std::vector<bool> out;
    for (const auto& key : keys) out.push_back(blocks_[ns].count(key) != 0);
    return out;
  }

  size_t remove(const std::string& ns, std::span<const std::string> keys) override {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (const auto& key : keys) n += blocks_[ns].erase(key);
    return n;
  }

  std::vector<std::string> list(const std::string& ns) override {
    std::lock_guard lock(mutex_);
    std::vector<std::string> keys;
    for (const auto& [key, data] : blocks_[ns]) keys.push_back(key);
    return keys;
  }

  model_claim claim_model(const std::string& model_key) override {
    std::unique_lock lock(mutex_);
    if (unreachable_) throw std::runtime_error("fake controller unreachable for " + model_key);
    auto& m = models_[model_key];
    ++m.claims;
    changed_.wait(lock, [&] { return m.state != model_state::fetching; });
    if (m.state == model_state::ready) return {model_claim::state::ready, m.manifest};
    m.state = model_state::fetching;
    ++m.fetch_grants;
    return {model_claim::state::fetch, {}};
  }

  void register_model(const std::string& model_key, const std::string& ns,
                      std::span<const std::byte> manifest, std::span<const std::string> block_keys,
                      uint64_t bytes, const std::string& failed) override {
    std::lock_guard lock(mutex_);
    auto& m = models_[model_key];
    if (failed.empty()) {
      m.state = model_state::ready;
      m.manifest.assign(manifest.begin(), manifest.end());
      m.ns = ns;
      m.block_keys.assign(block_keys.begin(), block_keys.end());
      m.bytes = bytes;
    } else {
      m.state = model_state::none;
      m.last_failure = failed;
    }
    changed_.notify_all();
  }

  // Hooks and observations.
  void set_unreachable(bool v) {
    std::lock_guard lock(mutex_);
    unreachable_ = v;
  }
  // Items the pool still stores before it rejects every put; -1 = no limit.
  void set_put_budget(int64_t items) {
    std::lock_guard lock(mutex_);
    put_budget_ = items;
  }
  // The next `items` block puts fail with `why` (server_unreachable: a timeout that a later
  // attempt gets past; quota_exceeded: a refusal no attempt does).
  void fail_next_puts(int items, protocol::ems_errc why) {
    std::lock_guard lock(mutex_);
    failing_puts_ = items;
    put_failure_ = why;
  }
  bool corrupt(const std::string& ns, const std::string& key) {
    std::lock_guard lock(mutex_);
    const auto it = blocks_[ns].find(key);
    if (it == blocks_[ns].end() || it->second.empty()) return false;
    it->second[it->second.size() / 2] ^= std::byte{0x5a};
    return true;
  }
  bool erase(const std::string& ns, const std::string& key) {
    std::lock_guard lock(mutex_);
    return blocks_[ns].erase(key) != 0;
  }
  int fetch_grants(const std::string& model_key) {
    std::lock_guard lock(mutex_);
    return models_[model_key].fetch_grants;
  }
  int claims(const std::string& model_key) {
    std::lock_guard lock(mutex_);
    return models_[model_key].claims;
  }
  bool registered(const std::string& model_key) {
    std::lock_guard lock(mutex_);
    return models_[model_key].state == model_state::ready;
  }
  std::vector<std::string> registered_keys(const std::string& model_key) {
    std::lock_guard lock(mutex_);
    return models_[model_key].block_keys;
  }
  std::string last_failure(const std::string& model_key) {
    std::lock_guard lock(mutex_);
    return models_[model_key].last_failure;
  }

private:
  enum class model_state { none, fetching, ready };
  struct model_entry {
    model_state state = model_state::none;
    std::vector<std::byte> manifest;
    std::string ns;
    std::vector<std::string> block_keys;
    uint64_t bytes = 0;
    std::string last_failure;
    int claims = 0;
    int fetch_grants = 0;
  };
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::map<std::string, std::vector<std::byte>>> blocks_;
  std::map<std::string, model_entry> models_;
  bool unreachable_ = false;
  int64_t put_budget_ = -1;
  int failing_puts_ = 0;
  protocol::ems_errc put_failure_ = protocol::ems_errc::server_unreachable;
  uint64_t bytes_served_ = 0;
  int put_calls_ = 0;
};

class temp_dir {
public:
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "model_cache_test.XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

private:
  fs::path path_;
};

// Removes a capped store's shared throttle file (in /dev/shm), which outlives the store.
struct throttle_cleanup {
  fs::path file;
  ~throttle_cleanup() {
    std::error_code ec;
    if (!file.empty()) fs::remove(file, ec);
  }
};

std::vector<std::byte> pseudo_random_bytes(size_t n, uint64_t seed) {
  std::vector<std::byte> out(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    out[i] = static_cast<std::byte>((x * 0x2545f4914f6cdd1dull) >> 56);
  }
  return out;
}

void write_bytes(const fs::path& path, std::span<const std::byte> data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void write_text(const fs::path& path, const std::string& text) {
  write_bytes(path, std::as_bytes(std::span(text.data(), text.size())));
}

std::vector<std::byte> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* p = reinterpret_cast<const std::byte*>(raw.data());
  return {p, p + raw.size()};
}

struct tensor_spec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  size_t elem_bytes = 4;
  size_t gap_before = 0; // padding bytes in front of the tensor's data
  uint64_t seed = 1;
};

// A real safetensors file: 8-byte LE header length, JSON header, data (with optional gaps
// between tensors and trailing bytes after the last one).
void write_safetensors(const fs::path& path, const std::vector<tensor_spec>& tensors,
                       size_t trailing = 0) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<std::byte> data;
  for (const auto& t : tensors) {
    size_t n = t.elem_bytes;
    for (auto d : t.shape) n *= static_cast<size_t>(d);
    const auto gap = pseudo_random_bytes(t.gap_before, t.seed + 1000);
    data.insert(data.end(), gap.begin(), gap.end());
    const size_t begin = data.size();
    const auto bytes = pseudo_random_bytes(n, t.seed);
    data.insert(data.end(), bytes.begin(), bytes.end());
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  const auto tail = pseudo_random_bytes(trailing, 77);
  data.insert(data.end(), tail.begin(), tail.end());
  const std::string json = header.dump();
  std::vector<std::byte> file(8);
  for (int i = 0; i < 8; ++i) file[i] = static_cast<std::byte>((json.size() >> (8 * i)) & 0xff);
  const auto* j = reinterpret_cast<const std::byte*>(json.data());
  file.insert(file.end(), j, j + json.size());
  file.insert(file.end(), data.begin(), data.end());
  write_bytes(path, file);
}

// What a synthetic model looks like; each field is a knob the version must notice.
struct model_shape {
  int64_t layer0_rows = 100;
  uint64_t embed_seed = 11;
  size_t extra_bytes = 200'001;
  std::string config = R"({"model_type": "tiny", "hidden_size": 1024})";
};

// bucket/<name>/: a > 1 MiB safetensors shard (header + samples in the version) with a gap
// between tensors and trailing bytes, a < 1 MiB shard with an empty tensor, small text files, a
// non-safetensors binary cut by size and an empty file.
fs::path make_model(const fs::path& bucket, const std::string& name, const model_shape& s = {}) {
  const fs::path dir = bucket / name;
  fs::create_directories(dir);
  write_safetensors(dir / "model-00001-of-00002.safetensors",
                    {{"embed", "F32", {256, 1024}, 4, 0, s.embed_seed},
                     {"layer.0.w", "BF16", {s.layer0_rows, 777}, 2, 64, 12}},
                    37);
  write_safetensors(dir / "model-00002-of-00002.safetensors",
                    {{"layer.1.w", "F32", {300, 500}, 4, 0, 13},
                     {"layer.1.b", "F32", {500}, 4, 0, 14},
                     {"layer.1.empty", "F32", {0}, 4, 0, 15}});
  write_text(dir / "config.json", s.config);
  write_text(dir / "tokenizer.json", std::string(3000, 't') + "\n");
  write_bytes(dir / "extra.bin", pseudo_random_bytes(s.extra_bytes, 21));
  write_text(dir / "empty.txt", "");
  return dir;
}

std::map<std::string, std::vector<std::byte>> folder_contents(const fs::path& dir) {
  std::map<std::string, std::vector<std::byte>> out;
  for (const auto& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] =
        e.is_regular_file() ? read_bytes(e.path()) : std::vector<std::byte>{};
  return out;
}

// Same file names (no leftovers such as temp files) and the same bytes in each.
void expect_same_folder(const fs::path& got, const fs::path& want) {
  const auto a = folder_contents(got), b = folder_contents(want);
  std::vector<std::string> an, bn;
  for (const auto& [n, d] : a) an.push_back(n);
  for (const auto& [n, d] : b) bn.push_back(n);
  ASSERT_EQ(an, bn) << got << " vs " << want;
  for (const auto& [n, d] : b) EXPECT_TRUE(a.at(n) == d) << n << " differs in " << got;
}

constexpr size_t small_blocks = 64 << 10;

model_cache_options test_options() {
  model_cache_options o;
  o.block_bytes = small_blocks;
  o.batch_bytes = 256 << 10; // several batches per load
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

// ---------------------------------------------------------------- object store

TEST(object_store, lists_sizes_reads_and_names_the_file_in_errors) {
  temp_dir tmp;
  fs::create_directories(tmp.path() / "m" / "sub");
  const auto data = pseudo_random_bytes(10'000, 3);
  write_bytes(tmp.path() / "m" / "b.bin", data);
  write_text(tmp.path() / "m" / "a.txt", "hello");
  object_store store(tmp.path(), 0);
  EXPECT_EQ(store.list("m"), (std::vector<std::string>{"a.txt", "b.bin"})); // no "sub"
  EXPECT_EQ(store.file_size("m/b.bin"), 10'000u);
  const auto part = store.read("m/b.bin", 100, 900);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + 100));
  EXPECT_EQ(store.stats().bytes_read, 900u);
  EXPECT_EQ(store.read_metadata("m/a.txt", 0, 5).size(), 5u);
  EXPECT_EQ(store.stats().metadata_bytes, 5u);

  try {
    store.read("m/missing.bin", 0, 1);
    FAIL() << "missing file read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.bin"), std::string::npos) << e.what();
  }
  try {
    store.read("m/b.bin", 9'990, 20);
    FAIL() << "short read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("short read"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("b.bin"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store.file_size("m/nope"), std::runtime_error);
  EXPECT_THROW(store.read("../x", 0, 1), std::invalid_argument);
  EXPECT_THROW(store.read("/etc/passwd", 0, 1), std::invalid_argument);
  EXPECT_THROW(object_store(tmp.path() / "nope", 0), std::runtime_error);
  EXPECT_THROW(object_store(tmp.path(), -1), std::invalid_argument);
}

TEST(object_store, a_read_takes_at_least_bytes_over_the_cap) {
  temp_dir tmp;
  const size_t x = 1 << 20;
  write_bytes(tmp.path() / "w.bin", pseudo_random_bytes(x, 5));
  const double cap = 4.0 * (1 << 20); // 4 MiB/s: 1 MiB takes >= 0.25 s
  object_store store(tmp.path(), cap, 128 << 10);
  throttle_cleanup cleanup{store.throttle_file()};
  ASSERT_FALSE(store.throttle_file().empty());
  const auto t0 = std::chrono::steady_clock::now();
  const auto data = store.read("w.bin", 0, x);
  const double took = seconds_since(t0);
  EXPECT_EQ(data.size(), x);
  EXPECT_GE(took, x / cap);
  EXPECT_GT(store.stats().seconds_waited, 0.0);
}

TEST(object_store, two_readers_of_one_bucket_share_the_cap) {
  temp_dir tmp;
  const size_t x = 1 << 20;
  write_bytes(tmp.path() / "a.bin", pseudo_random_bytes(x, 6));
  write_bytes(tmp.path() / "b.bin", pseudo_random_bytes(x, 7));
  const double cap = 4.0 * (1 << 20);
  // Two stores, as two processes would have: only the shared file links their caps.
  object_store first(tmp.path(), cap, 128 << 10);
  object_store second(tmp.path(), cap, 128 << 10);
  throttle_cleanup cleanup{first.throttle_file()};
  EXPECT_EQ(first.throttle_file(), second.throttle_file());
  const auto t0 = std::chrono::steady_clock::now();
  double took_a = 0, took_b = 0;
  std::thread a([&] {
    first.read("a.bin", 0, x);
    took_a = seconds_since(t0);
  });
  std::thread b([&] {
    second.read("b.bin", 0, x);
    took_b = seconds_since(t0);
  });
  a.join();
  b.join();
  EXPECT_GE(std::max(took_a, took_b), 2 * x / cap);
  // Chunks interleave: neither reader finishes in its solo time while the other holds the cap.
  EXPECT_GE(std::min(took_a, took_b), 1.5 * x / cap);
}

TEST(object_store, two_processes_share_the_cap) {
  temp_dir tmp;
  const size_t x = 1 << 20;
  write_bytes(tmp.path() / "a.bin", pseudo_random_bytes(x, 8));
  const double cap = 4.0 * (1 << 20);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = 0;
    try {
      object_store store(tmp.path(), cap, 128 << 10);
      rc = store.read("a.bin", 0, x).size() == x ? 0 : 1;
    } catch (...) {
      rc = 2;
    }
    ::_exit(rc);
  }
  object_store store(tmp.path(), cap, 128 << 10);
  throttle_cleanup cleanup{store.throttle_file()};
  store.read("a.bin", 0, x);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const double took = seconds_since(t0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_GE(took, 2 * x / cap);
}

TEST(object_store, cap_zero_is_unlimited) {
  temp_dir tmp;
  const size_t x = 8 << 20;
  write_bytes(tmp.path() / "w.bin", pseudo_random_bytes(x, 9));
  object_store store(tmp.path(), 0, 128 << 10);
  EXPECT_TRUE(store.throttle_file().empty());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(store.read("w.bin", 0, x).size(), x);
  EXPECT_LT(seconds_since(t0), 2.0); // a 4 MiB/s cap would need 2 s
  EXPECT_EQ(store.stats().seconds_waited, 0.0);
  EXPECT_EQ(store.stats().bytes_read, x);
}

// ---------------------------------------------------------------- model blocks

TEST(model_blocks, version_is_deterministic_and_changes_with_the_model) {
  temp_dir tmp;
  const auto dir = make_model(tmp.path(), "tiny");
  const std::string v = plan_model_blocks(dir, "tiny", small_blocks).version;
  EXPECT_EQ(v.size(), 16u);
  EXPECT_EQ(plan_model_blocks(dir, "tiny", small_blocks).version, v);
  EXPECT_EQ(plan_model_blocks(dir, "other", 1 << 20).version, v); // neither id nor block size
  // The same content elsewhere is the same model.
  EXPECT_EQ(plan_model_blocks(make_model(tmp.path(), "copy"), "tiny").version, v);
  {
    object_store store(tmp.path(), 0);
    EXPECT_EQ(model_version(store, "tiny"), v);
  }

  std::set<std::string> versions{v};
  const auto variant = [&](const std::string& name, model_shape s) {
    const auto version = plan_model_blocks(make_model(tmp.path(), name, s), "tiny").version;
    EXPECT_TRUE(versions.insert(version).second) << name << " kept a known version";
  };
  model_shape shape;
  shape.layer0_rows = 101; // a tensor's shape, hence offsets and file size
  variant("shape", shape);
  shape = {};
  shape.extra_bytes += 1; // a large non-safetensors file's size
  variant("size", shape);
  shape = {};
  shape.config = R"({"model_type": "tiny", "hidden_size": 1025})"; // a small file's bytes
  variant("config", shape);
  shape = {};
  shape.embed_seed = 99; // same shapes, new weights: caught by the sampled data bytes
  variant("weights", shape);

  // A new file is a new model too.
  const auto extra = make_model(tmp.path(), "plus");
  write_text(extra / "generation_config.json", "{}");
  EXPECT_TRUE(versions.insert(plan_model_blocks(extra, "tiny").version).second);
}

TEST(model_blocks, blocks_cover_every_byte_once_and_are_keyed_by_tensor) {
  temp_dir tmp;
  const auto dir = make_model(tmp.path(), "tiny");
  const auto m = plan_model_blocks(dir, "tiny", small_blocks);
  EXPECT_FALSE(m.has_checksums);
  EXPECT_EQ(m.key(), "tiny@" + m.version);
  ASSERT_EQ(m.files.size(), 6u);
  std::set<std::string> keys;
  uint64_t total = 0;
  for (const auto& f : m.files) {
    EXPECT_EQ(f.size, fs::file_size(dir / f.name)) << f.name;
    std::vector<bool> covered(f.size, false);
    for (const auto& b : f.blocks) {
      EXPECT_TRUE(keys.insert(b.key).second) << b.key;
      EXPECT_EQ(b.key.rfind("model/" + m.key() + "/", 0), 0u) << b.key;
      ASSERT_LE(b.offset + b.length, f.size) << b.key;
      for (uint64_t i = b.offset; i < b.offset + b.length; ++i) {
        ASSERT_FALSE(covered[i]) << f.name << " byte " << i << " in two blocks";
        covered[i] = true;
      }
      if (b.key.find("#header") == std::string::npos) {
        EXPECT_LE(b.length, small_blocks) << b.key;
      }
    }
    EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](bool c) { return c; })) << f.name;
    total += f.size;
  }
  EXPECT_EQ(m.total_bytes(), total);
  EXPECT_EQ(keys.size(), m.block_count());

  const auto has = [&](const std::string& suffix) {
    return keys.count("model/" + m.key() + "/" + suffix) != 0;
  };
  EXPECT_TRUE(has("model-00001-of-00002.safetensors#header/0"));
  EXPECT_TRUE(has("embed/0"));
  EXPECT_TRUE(has("embed/15")); // 1 MiB in 64 KiB blocks
  EXPECT_FALSE(has("embed/16"));
  EXPECT_TRUE(has("layer.0.w/2"));
  EXPECT_TRUE(has("layer.1.b/0"));
  EXPECT_TRUE(has("extra.bin/3")); // 200,001 bytes cut by size
  EXPECT_FALSE(has("extra.bin/4"));
  EXPECT_TRUE(has("config.json/0"));
  // The 64 padding bytes before layer.0.w and the 37 trailing bytes have gap blocks.
  size_t gaps = 0;
  for (const auto& k : keys)
    gaps += k.find("model-00001-of-00002.safetensors#gap@") != std::string::npos;
  EXPECT_EQ(gaps, 2u);
  const auto empty = std::find_if(m.files.begin(), m.files.end(),
                                  [](const model_file& f) { return f.name == "empty.txt"; });
  ASSERT_NE(empty, m.files.end());
  EXPECT_TRUE(empty->blocks.empty());
}

TEST(model_blocks, manifest_round_trips_and_malformed_bytes_are_rejected) {
  temp_dir tmp;
  auto m = plan_model_blocks(make_model(tmp.path(), "tiny"), "tiny", small_blocks);
  m.has_checksums = true;
  for (auto& f : m.files)
    for (auto& b : f.blocks) b.checksum = b.offset * 31 + b.length;
  const auto bytes = serialize_manifest(m);
  const auto back = parse_manifest(bytes);
  EXPECT_EQ(back.model_id, m.model_id);
  EXPECT_EQ(back.version, m.version);
  EXPECT_EQ(back.block_bytes, m.block_bytes);
  EXPECT_TRUE(back.has_checksums);
  ASSERT_EQ(back.files.size(), m.files.size());
  for (size_t i = 0; i < m.files.size(); ++i) {
    EXPECT_EQ(back.files[i].name, m.files[i].name);
    EXPECT_EQ(back.files[i].size, m.files[i].size);
    ASSERT_EQ(back.files[i].blocks.size(), m.files[i].blocks.size());
    for (size_t b = 0; b < m.files[i].blocks.size(); ++b) {
      EXPECT_EQ(back.files[i].blocks[b].key, m.files[i].blocks[b].key);
      EXPECT_EQ(back.files[i].blocks[b].offset, m.files[i].blocks[b].offset);
      EXPECT_EQ(back.files[i].blocks[b].length, m.files[i].blocks[b].length);
      EXPECT_EQ(back.files[i].blocks[b].checksum, m.files[i].blocks[b].checksum);
    }
  }
  EXPECT_EQ(serialize_manifest(back), bytes);

  const auto rejects = [](std::vector<std::byte> bad, const std::string& why) {
    try {
      parse_manifest(bad);
      ADD_FAILURE() << why << ": accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("malformed model manifest"), std::string::npos)
          << why << ": " << e.what();
    }
  };
  rejects({}, "empty");
  rejects(std::vector<std::byte>(bytes.begin(), bytes.begin() + bytes.size() / 2), "truncated");
  auto trailing = bytes;
  trailing.push_back(std::byte{0});
  rejects(trailing, "trailing byte");
  rejects(pseudo_random_bytes(500, 4), "garbage");
  {
    msgpack::sbuffer buf;
    msgpack::pack(buf, 5);
    rejects({reinterpret_cast<const std::byte*>(buf.data()),
             reinterpret_cast<const std::byte*>(buf.data()) + buf.size()},
            "not a map");
  }
  {
    msgpack::sbuffer buf;
    msgpack::pack(buf, std::map<std::string, int>{{"model_id", 1}});
    rejects({reinterpret_cast<const std::byte*>(buf.data()),
             reinterpret_cast<const std::byte*>(buf.data()) + buf.size()},
            "wrong field type");
  }
  {
    msgpack::sbuffer buf;
    msgpack::pack(buf, std::map<std::string, std::string>{{"model_id", "tiny"}});
    rejects({reinterpret_cast<const std::byte*>(buf.data()),
             reinterpret_cast<const std::byte*>(buf.data()) + buf.size()},
            "no format tag");
  }
  // files: config.json, empty.txt, extra.bin, model-00001..., model-00002..., tokenizer.json
  ASSERT_EQ(m.files[3].name, "model-00001-of-00002.safetensors");
  ASSERT_GE(m.files[3].blocks.size(), 2u);
  auto gap = m;
  gap.files[3].blocks[1].offset += 1;
  rejects(serialize_manifest(gap), "gap between blocks");
  auto short_cover = m;
  short_cover.files[3].blocks.pop_back();
  rejects(serialize_manifest(short_cover), "last block missing");
  auto twice = m;
  twice.files[3].blocks[0].key = twice.files[0].blocks[0].key;
  rejects(serialize_manifest(twice), "duplicate key");
  auto escape = m;
  escape.files[0].name = "../evil";
  rejects(serialize_manifest(escape), "file name leaving the folder");
  auto format = m;
  format.format = "something else/1";
  rejects(serialize_manifest(format), "wrong format");
}

TEST(model_blocks, broken_safetensors_are_rejected_naming_the_file) {
  temp_dir tmp;
  const auto expect_error = [&](const std::string& name, const std::vector<std::byte>& file,
                                const std::string& what) {
    const auto dir = tmp.path() / name;
    fs::create_directories(dir);
    write_bytes(dir / "w.safetensors", file);
    try {
      plan_model_blocks(dir, "m");
      ADD_FAILURE() << name << ": accepted";
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("w.safetensors"), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  const auto file_with = [](const std::string& json, size_t data_bytes) {
    std::vector<std::byte> f(8);
    for (int i = 0; i < 8; ++i) f[i] = static_cast<std::byte>((json.size() >> (8 * i)) & 0xff);
    for (char c : json) f.push_back(static_cast<std::byte>(c));
    f.resize(f.size() + data_bytes);
    return f;
  };
  expect_error("tiny", std::vector<std::byte>(5), "8-byte");
  auto huge = file_with("{}", 0);
  huge[3] = std::byte{1};
  expect_error("huge", huge, "header length");
  expect_error("json", file_with("{not json", 0), "bad JSON");
  expect_error("range", file_with(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
               "tensor a");
  expect_error("overlap",
               file_with(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                         R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                         24),
               "overlaps");
  expect_error("offsets", file_with(R"({"a":{"dtype":"F32","shape":[4]}})", 16), "data_offsets");
  EXPECT_THROW(plan_model_blocks(tmp.path() / "tiny", "m", 0), std::invalid_argument);
  EXPECT_THROW(plan_model_blocks(tmp.path() / "tiny", "a@b"), std::invalid_argument);
}

// ---------------------------------------------------------------- model cache

TEST(model_cache, load_gives_byte_identical_files_from_the_pool) {
  temp_dir tmp;
  const auto src = make_model(tmp.path() / "bucket", "tiny");
  object_store store(tmp.path() / "bucket", 0);
  fake_pool pool;
  model_cache first(pool, store, test_options());
  const std::string version = first.version_of("tiny");
  EXPECT_FALSE(first.check("tiny", version));

  const auto out = first.load("tiny", "tiny", tmp.path() / "local-a");
  EXPECT_EQ(out, tmp.path() / "local-a" / ("tiny@" + version));
  expect_same_folder(out, src);
  // The local copy is the cluster user's only.
  for (const auto& f : std::filesystem::directory_iterator(out))
    EXPECT_EQ(std::filesystem::status(f).permissions() & std::filesystem::perms::mask,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write)
        << f.path();
  const auto manifest = plan_model_blocks(src, "tiny", small_blocks);
  EXPECT_EQ(first.stats().fetches, 1u);
  EXPECT_EQ(first.stats().bytes_from_object_store, manifest.total_bytes());
  EXPECT_EQ(first.stats().bytes_from_pool, manifest.total_bytes()); // read back from the pool
  EXPECT_EQ(first.stats().fallback_blocks, 0u);
  EXPECT_TRUE(first.check("tiny", version));
  EXPECT_TRUE(pool.registered("tiny@" + version));
  // The controller knows every block of the model (and the manifest block), to evict it whole.
  EXPECT_EQ(pool.registered_keys("tiny@" + version).size(), manifest.block_count() + 1);

  // A second instance reads only from the pool.
  model_cache second(pool, store, test_options());
  const auto out2 = second.load("tiny", "tiny", tmp.path() / "local-b");
  expect_same_folder(out2, src);
  EXPECT_EQ(second.stats().fetches, 0u);
  EXPECT_EQ(second.stats().bytes_from_object_store, 0u);
  EXPECT_EQ(second.stats().bytes_from_pool, manifest.total_bytes());
  EXPECT_EQ(store.stats().bytes_read, manifest.total_bytes());
  EXPECT_EQ(pool.fetch_grants("tiny@" + version), 1);

  // Loading again over an existing copy replaces it with the same bytes.
  expect_same_folder(second.load("tiny", "tiny", tmp.path() / "local-b"), src);
}

TEST(model_cache, eight_instances_loading_at_once_read_object_storage_once) {
  temp_dir tmp;
  const auto src = make_model(tmp.path() / "bucket", "tiny");
  object_store store(tmp.path() / "bucket", 0);
  fake_pool pool;
  constexpr int instances = 8;
  std::vector<std::unique_ptr<model_cache>> caches;
  for (int i = 0; i < instances; ++i)
    caches.push_back(std::make_unique<model_cache>(pool, store, test_options()));
  std::vector<fs::path> outs(instances);
  std::vector<std::string> errors(instances);
  std::vector<std::thread> threads;
  for (int i = 0; i < instances; ++i)
    threads.emplace_back([&, i] {
      try {
        outs[i] = caches[i]->load("tiny", "tiny", tmp.path() / ("node-" + std::to_string(i)));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();

  const auto manifest = plan_model_blocks(src, "tiny", small_blocks);
  uint64_t fetches = 0, from_pool = 0;
  for (int i = 0; i < instances; ++i) {
    ASSERT_EQ(errors[i], "") << "instance " << i;
    expect_same_folder(outs[i], src);
    const auto s = caches[i]->stats();
    fetches += s.fetches;
    from_pool += s.bytes_from_pool;
    EXPECT_EQ(s.fallback_blocks, 0u) << "instance " << i;
    EXPECT_EQ(s.pool_failures, 0u) << "instance " << i;
  }
  EXPECT_EQ(fetches, 1u);
  EXPECT_EQ(store.stats().bytes_read, manifest.total_bytes()); // the model left the bucket once
  EXPECT_EQ(from_pool, instances * manifest.total_bytes());
  EXPECT_EQ(pool.claims(manifest.key()), instances);
  EXPECT_EQ(pool.fetch_grants(manifest.key()), 1);
}

TEST(model_cache, a_corrupt_or_missing_block_is_read_from_object_storage) {
  temp_dir tmp;
  const auto src = make_model(tmp.path() / "bucket", "tiny");
  object_store store(tmp.path() / "bucket", 0);
  fake_pool pool;
  model_cache fetcher(pool, store, test_options());
  fetcher.prefetch("tiny", "tiny");

  const auto manifest = plan_model_blocks(src, "tiny", small_blocks);
  const auto& embed_file = manifest.files[3];
  ASSERT_EQ(embed_file.name, "model-00001-of-00002.safetensors");
  const auto& bad = embed_file.blocks[3];
  const auto& gone = embed_file.blocks[7];
  ASSERT_TRUE(pool.corrupt("models", bad.key));
  ASSERT_TRUE(pool.erase("models", gone.key));

  const uint64_t store_before = store.stats().bytes_read;
  model_cache loader(pool, store, test_options());
  const auto out = loader.load("tiny", "tiny", tmp.path() / "local");
  expect_same_folder(out, src);
  const auto s = loader.stats();
  EXPECT_EQ(s.fallback_blocks, 2u);
  EXPECT_EQ(s.bytes_from_object_store, bad.length + gone.length);
  EXPECT_EQ(store.stats().bytes_read - store_before, bad.length + gone.length);
  EXPECT_EQ(s.bytes_from_pool, manifest.total_bytes() - bad.length - gone.length);
  EXPECT_FALSE(loader.check("tiny", manifest.version)); // a block is gone
}

TEST(model_cache, an_unreachable_pool_degrades_to_object_storage) {
  temp_dir tmp;
  const auto src = make_model(tmp.path() / "bucket", "tiny");
  object_store store(tmp.path() / "bucket", 0);
  fake_pool pool;
  pool.set_unreachable(true);
  model_cache cache(pool, store, test_options());
  EXPECT_FALSE(cache.check("tiny", cache.version_of("tiny")));
  EXPECT_THROW(cache.prefetch("tiny", "tiny"), std::runtime_error);
  const auto out = cache.load("tiny", "tiny", tmp.path() / "local");
  expect_same_folder(out, src);
  const auto s = cache.stats();
  EXPECT_EQ(s.pool_failures, 1u);
  EXPECT_EQ(s.bytes_from_pool, 0u);
  EXPECT_EQ(s.bytes_from_object_store, plan_model_blocks(src, "tiny").total_bytes());
}

TEST(model_cache, a_fetch_whose_puts_fail_passes_the_claim_on) {
  temp_dir tmp;
  const auto src = make_model(tmp.path() / "bucket", "tiny");
  object_store store(tmp.path() / "bucket", 0);
  fake_pool pool;
  pool.set_put_budget(5); // the first batch (4 blocks) and one block of the second get in
  model_cache first(pool, store, test_options());
  const std::string key = "tiny@" + first.version_of("tiny");
  expect_same_folder(first.load("tiny", "tiny", tmp.path() / "a"), src);
  EXPECT_EQ(first.stats().pool_failures, 1u);
  EXPECT_FALSE(pool.registered(key));
  EXPECT_NE(pool.last_failure(key).find("fake pool rejects"), std::string::npos)
      << pool.last_failure(key);
  EXPECT_TRUE(pool.list("models").empty()); // nothing half-fetched is left behind

  pool.set_put_budget(-1);
  model_cache second(pool, store, test_options());
  const auto r = second.prefetch("tiny", "tiny");
  EXPECT_TRUE(r.fetched);
  EXPECT_EQ(r.failure, "");
  EXPECT_TRUE(r.manifest.has_checksums);
  EXPECT_EQ(pool.fetch_grants(key), 2);
  EXPECT_TRUE(second.check("tiny", r.manifest.version));
  EXPECT_FALSE(second.prefetch("tiny", "tiny").fetched);
}

TEST(model_cache, a_put_that_timed_out_is_made_again_and_a_refused_one_is_not) {
  temp_dir tmp;
  const auto src = make_model(tmp.path() / "bucket", "tiny");
  object_store store(tmp.path() / "bucket", 0);
  fake_pool pool;
  // A server slow under load: three blocks of the first batch time out.
  pool.fail_next_puts(3, protocol::ems_errc::server_unreachable);
  model_cache fetcher(pool, store, test_options());
  const auto r = fetcher.prefetch("tiny", "tiny");
  EXPECT_TRUE(r.fetched);
  EXPECT_EQ(r.failure, "") << "the fetch gave up on puts a second attempt stores";
  EXPECT_EQ(fetcher.stats().put_retries, 3u);
  model_cache reader(pool, store, test_options());
  expect_same_folder(reader.load("tiny", "tiny", tmp.path() / "a"), src);
  EXPECT_EQ(reader.stats().bytes_from_object_store, 0u) << "every block was in the pool";

  // A full pool is no better on a second try: the fetch fails at once and passes the claim on.
  make_model(tmp.path() / "bucket2", "tiny");
  object_store store2(tmp.path() / "bucket2", 0);
  fake_pool full;
  full.fail_next_puts(1, protocol::ems_errc::quota_exceeded);
  model_cache refused(full, store2, test_options());
  const auto f = refused.prefetch("tiny", "tiny");
  EXPECT_NE(f.failure.find("pool_quota_exceeded"), std::string::npos) << f.failure;
  EXPECT_EQ(refused.stats().put_retries, 0u);
}

TEST(model_cache, a_changed_model_gets_new_keys) {
  temp_dir tmp;
  const auto bucket = tmp.path() / "bucket";
  make_model(bucket, "tiny");
  object_store store(bucket, 0);
  fake_pool pool;
  model_cache cache(pool, store, test_options());
  const auto old_version = cache.prefetch("tiny", "tiny").manifest.version;

  model_shape changed;
  changed.layer0_rows = 120;
  const auto src = make_model(bucket, "tiny", changed); // rewritten in place
  const std::string new_version = cache.version_of("tiny");
  EXPECT_NE(new_version, old_version);
  EXPECT_TRUE(cache.check("tiny", old_version));
  EXPECT_FALSE(cache.check("tiny", new_version));
  const auto out = cache.load("tiny", "tiny", tmp.path() / "local");
  EXPECT_EQ(out.filename().string(), "tiny@" + new_version);
  expect_same_folder(out, src);
  EXPECT_EQ(cache.stats().fetches, 2u);
  EXPECT_TRUE(cache.check("tiny", new_version));
}

TEST(model_cache, the_baseline_copies_from_object_storage_under_the_cap) {
  temp_dir tmp;
  const auto src = make_model(tmp.path() / "bucket", "tiny");
  const double cap = 16.0 * (1 << 20);
  object_store store(tmp.path() / "bucket", cap);
  throttle_cleanup cleanup{store.throttle_file()};
  fake_pool pool;
  model_cache cache(pool, store, test_options());
  const auto total = plan_model_blocks(src, "tiny").total_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = cache.load_from_object_store("tiny", "tiny", tmp.path() / "local");
  EXPECT_GE(seconds_since(t0), total / cap);
  expect_same_folder(out, src);
  EXPECT_EQ(cache.stats().bytes_from_object_store, total);
  EXPECT_EQ(cache.stats().bytes_from_pool, 0u);
  EXPECT_EQ(store.stats().bytes_read, total);
  EXPECT_GT(cache.stats().seconds, 0.0);
  EXPECT_EQ(pool.claims("tiny@" + cache.version_of("tiny")), 0);
}
