#pragma once
// Model caching over the EMS pool (§4.4): when N instances start the same model, one of them
// reads it from object storage (whose bandwidth every reader of the bucket shares) and puts its
// blocks into the pool; the others wait for that fetch through the controller's claim_model and
// then read the blocks from the pool, so the bucket serves the model's bytes once instead of N
// times. Keys carry the model's version (a fingerprint of the object-store folder), so a changed
// model never reads an old model's blocks. Every block is checked against the registered
// manifest's checksum; a missing or bad block is read from object storage instead, and a pool
// that cannot be reached at all degrades to a plain copy from object storage: the pool only ever
// makes a load faster, never wrong. Thread-safe: instances may share one model_cache.

#include "services/ems/model_blocks.hpp"
#include "services/ems/object_store.hpp"
#include "services/ems/pool_client.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace supernode::services::ems {

struct model_cache_options {
  std::string ns = "models";
  size_t block_bytes = default_model_block_bytes;
  // Bytes per put or get call: large enough to keep every server busy, small enough to bound
  // the memory a load holds at once.
  size_t batch_bytes = 64ull << 20;
};

struct model_cache_stats {
  uint64_t bytes_from_pool = 0;
  uint64_t bytes_from_object_store = 0; // model data: fetches, fallbacks and plain copies
  uint64_t fallback_blocks = 0;         // missing or bad in the pool, read from object storage
  uint64_t pool_failures = 0;           // loads that gave up on the pool (unreachable, throws)
  uint64_t fetches = 0;                 // models this cache read and put into the pool
  uint64_t put_retries = 0;             // block puts of a fetch made a second time
  uint64_t loads = 0;
  double seconds = 0; // spent in load and load_from_object_store
};

struct prefetch_result {
  model_manifest manifest; // the registered one, with checksums
  bool fetched = false;    // this call read the model from object storage
  // Why the fetched model could not be registered (a put failed); the claim then passed on.
  std::string failure;
};

class model_cache {
public:
  // Throws std::invalid_argument for an empty namespace or zero block or batch bytes.
  model_cache(pool_client& pool, object_store& store, model_cache_options options = {});

  // The version of the model in `folder` of the object store (a metadata-only plan).
  std::string version_of(const std::string& folder);
  // Whether the pool holds the model: its manifest block and every block it names. Never
  // throws; an unreachable pool answers false.
  bool check(const std::string& model_id, const std::string& version);
  // Makes the model of `folder` be in the pool. Only one of many concurrent callers (across
  // instances) fetches; the others wait for it and return its manifest. Throws
  // std::runtime_error when the controller cannot be reached, the registered manifest is
  // malformed, or object storage fails (the claim is released first).
  prefetch_result prefetch(const std::string& model_id, const std::string& folder);
  // The model's files, byte-identical, in local_dir/<id>@<version>/ (returned): from the pool
  // after a prefetch, each block verified, with object storage as the fallback per block or for
  // the whole model when the pool fails. Files are written under a temporary name and renamed,
  // so a present file is always complete. Throws std::runtime_error when object storage fails
  // too, naming the file.
  std::filesystem::path load(const std::string& model_id, const std::string& folder,
                             const std::filesystem::path& local_dir);
  // The baseline without a pool: every byte from object storage.
  std::filesystem::path load_from_object_store(const std::string& model_id,
                                               const std::string& folder,
                                               const std::filesystem::path& local_dir);

  model_cache_stats stats() const;
  const model_cache_options& options() const { return options_; }

  // Tries per block put of a fetch whose failure says a later attempt may succeed.
  static constexpr int max_put_attempts = 2;

private:
  prefetch_result prefetch_planned(model_manifest plan, const std::string& folder);
  // Reads every block, puts it in batches and registers the model; returns why a put failed
  // (the claim is then released) or "" when registered.
  std::string fetch_into_pool(model_manifest& manifest, const std::string& folder);
  std::filesystem::path copy_from_store(const model_manifest& manifest, const std::string& folder,
                                        const std::filesystem::path& local_dir);
  std::filesystem::path copy_from_pool(const model_manifest& manifest, const std::string& folder,
                                       const std::filesystem::path& local_dir);
  std::vector<std::byte> read_block(const std::string& folder, const model_file& file,
                                    const model_block& block, bool verify);

  pool_client& pool_;
  object_store& store_;
  model_cache_options options_;
  std::atomic<uint64_t> bytes_from_pool_{0};
  std::atomic<uint64_t> bytes_from_store_{0};
  std::atomic<uint64_t> fallback_blocks_{0};
  std::atomic<uint64_t> pool_failures_{0};
  std::atomic<uint64_t> fetches_{0};
  std::atomic<uint64_t> put_retries_{0};
  std::atomic<uint64_t> loads_{0};
  std::atomic<uint64_t> ns_{0};
};

} // namespace supernode::services::ems
