#include "services/ems/model_cache.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <stdexcept>
#include <unistd.h>

namespace supernode::services::ems {

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

std::string join(const std::string& folder, const std::string& name) {
  return folder.empty() ? name : folder + "/" + name;
}

// Object storage failing under a fetch: the pool is not to blame, so load must not answer it by
// reading object storage again.
struct object_store_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The model's files being written: each under a temporary name in the target folder, renamed
// into place only once every byte is there. Unfinished files are removed on destruction.
class model_output {
public:
  model_output(const std::filesystem::path& dir, const model_manifest& manifest) : dir_(dir) {
    static std::atomic<uint64_t> next_id{0};
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      throw std::runtime_error("model cache: cannot create " + dir.string() + ": " + ec.message());
    const std::string suffix = ".tmp-" + std::to_string(::getpid()) + "-" +
                               std::to_string(next_id.fetch_add(1, std::memory_order_relaxed));
    for (const auto& f : manifest.files) {
      file out;
      out.final_path = dir / f.name;
      out.temp_path = dir / ("." + f.name + suffix);
      // Private like everything under the run folder (the cluster's user only).
      out.fd = ::open(out.temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (out.fd < 0)
        throw std::runtime_error("model cache: cannot create " + out.temp_path.string() + ": " +
                                 errno_text());
      files_.push_back(std::move(out));
    }
  }
  ~model_output() {
    for (auto& f : files_) {
      if (f.fd >= 0) ::close(f.fd);
      if (!committed_) ::unlink(f.temp_path.c_str());
    }
  }
  model_output(const model_output&) = delete;
  model_output& operator=(const model_output&) = delete;

  void write(size_t file_index, uint64_t offset, std::span<const std::byte> data) {
    const auto& f = files_[file_index];
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n =
          ::pwrite(f.fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw std::runtime_error("model cache: cannot write " + f.temp_path.string() +
                                 " at offset " + std::to_string(offset + done) + ": " +
                                 errno_text());
      done += static_cast<size_t>(n);
    }
  }

  void commit() {
    for (auto& f : files_) {
      const int fd = f.fd;
      f.fd = -1;
      if (::close(fd) != 0)
        throw std::runtime_error("model cache: cannot close " + f.temp_path.string() + ": " +
                                 errno_text());
    }
    for (const auto& f : files_) {
      if (::rename(f.temp_path.c_str(), f.final_path.c_str()) != 0)
        throw std::runtime_error("model cache: cannot rename " + f.temp_path.string() + " to " +
                                 f.final_path.string() + ": " + errno_text());
    }
    committed_ = true;
  }

private:
  struct file {
    std::filesystem::path final_path;
    std::filesystem::path temp_path;
    int fd = -1;
  };
  std::filesystem::path dir_;
  std::vector<file> files_;
  bool committed_ = false;
};

// The registered manifest must describe the folder this instance planned: same version, same
// files and sizes. Anything else means a key collision or a broken registry.
bool same_model(const model_manifest& registered, const model_manifest& plan) {
  if (registered.key() != plan.key() || registered.files.size() != plan.files.size()) return false;
  for (size_t i = 0; i < plan.files.size(); ++i)
    if (registered.files[i].name != plan.files[i].name ||
        registered.files[i].size != plan.files[i].size)
      return false;
  return true;
}

class load_timer {
public:
  explicit load_timer(std::atomic<uint64_t>& ns, std::atomic<uint64_t>& loads) : ns_(ns) {
    loads.fetch_add(1, std::memory_order_relaxed);
  }
  ~load_timer() {
    const auto spent = std::chrono::steady_clock::now() - start_;
    ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count(),
                  std::memory_order_relaxed);
  }

private:
  std::atomic<uint64_t>& ns_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

} // namespace

model_cache::model_cache(pool_client& pool, object_store& store, model_cache_options options)
    : pool_(pool), store_(store), options_(std::move(options)) {
  if (options_.ns.empty()) throw std::invalid_argument("model cache: empty namespace");
  if (options_.block_bytes == 0) throw std::invalid_argument("model cache: block_bytes is 0");
  if (options_.batch_bytes == 0) throw std::invalid_argument("model cache: batch_bytes is 0");
}

std::string model_cache::version_of(const std::string& folder) {
  return model_version(store_, folder);
}

bool model_cache::check(const std::string& model_id, const std::string& version) {
  try {
    const std::string key = model_key(model_id, version);
    const std::string manifest_key = model_manifest_key(key);
    const auto got = pool_.get(options_.ns, std::span<const std::string>(&manifest_key, 1));
    if (got.blocks.size() != 1 || !got.blocks[0]) return false;
    const auto manifest = parse_manifest(*got.blocks[0]);
    if (manifest.key() != key || !manifest.has_checksums) return false;
    const auto keys = manifest.block_keys();
    const auto present = pool_.exists(options_.ns, keys);
    return present.size() == keys.size() &&
           std::all_of(present.begin(), present.end(), [](bool b) { return b; });
  } catch (const std::exception&) {
    return false;
  }
}

prefetch_result model_cache::prefetch(const std::string& model_id, const std::string& folder) {
  return prefetch_planned(plan_model_blocks(store_, folder, model_id, options_.block_bytes),
                          folder);
}

prefetch_result model_cache::prefetch_planned(model_manifest plan, const std::string& folder) {
  const std::string key = plan.key();
  const model_claim claim = pool_.claim_model(key);
  prefetch_result result;
  if (claim.what == model_claim::state::ready) {
    try {
      result.manifest = parse_manifest(claim.manifest);
    } catch (const std::exception& e) {
      throw std::runtime_error("model cache: registered manifest of " + key + ": " + e.what());
    }
    if (!same_model(result.manifest, plan) || !result.manifest.has_checksums)
      throw std::runtime_error("model cache: registered manifest of " + key + " describes " +
                               result.manifest.key() + ", not the planned folder " + folder);
    return result;
  }

  result.manifest = std::move(plan);
  result.fetched = true;
  try {
    result.failure = fetch_into_pool(result.manifest, folder);
  } catch (const std::exception& e) {
    // Release the claim so that a waiter tries instead of waiting forever.
    try {
      pool_.register_model(key, options_.ns, {}, {}, 0, e.what());
    } catch (const std::exception&) {
      // The controller is gone as well; its claim dies with it.
    }
    throw;
  }
  fetches_.fetch_add(1, std::memory_order_relaxed);
  return result;
}

std::string model_cache::fetch_into_pool(model_manifest& manifest, const std::string& folder) {
  const std::string key = manifest.key();
  std::vector<std::vector<std::byte>> buffers;
  std::vector<pool_put> items;
  std::vector<std::string> sent; // keys of every put made, to take back after a failure
  size_t batch = 0;
  std::string failure;
  const auto flush = [&] {
    if (items.empty()) return;
    for (const auto& item : items) sent.push_back(item.key);
    try {
      // A put a later attempt may store (a server that timed out under load) is made again,
      // once: giving the fetch up would make the next claimant read the whole model again.
      std::vector<pool_put> pending = items;
      for (int attempt = 1; !pending.empty() && failure.empty(); ++attempt) {
        const auto outcomes = pool_.put(options_.ns, pending);
        std::vector<pool_put> again;
        for (size_t i = 0; i < pending.size() && failure.empty(); ++i) {
          if (i < outcomes.size() && outcomes[i].stored) continue;
          if (attempt < max_put_attempts && i < outcomes.size() &&
              outcomes[i].error.retry_elsewhere()) {
            again.push_back(pending[i]);
            continue;
          }
          failure = "put of " + pending[i].key +
                    " failed: " + (i < outcomes.size() ? outcomes[i].error.str() : "no outcome");
        }
        if (!again.empty()) put_retries_.fetch_add(again.size(), std::memory_order_relaxed);
        pending = std::move(again);
      }
    } catch (const std::exception& e) {
      failure = std::string("put failed: ") + e.what();
    }
    items.clear();
    buffers.clear();
    batch = 0;
  };

  // A put that fails stops the fetch: the model cannot be registered whole, so reading the rest
  // of it from object storage would only slow the next claimant down.
  for (auto& file : manifest.files) {
    for (auto& block : file.blocks) {
      buffers.push_back(read_block(folder, file, block, false));
      block.checksum = model_block_checksum(buffers.back());
      items.push_back({block.key, buffers.back()});
      batch += block.length;
      if (batch >= options_.batch_bytes) flush();
      if (!failure.empty()) break;
    }
    if (!failure.empty()) break;
  }
  if (failure.empty()) flush();

  std::vector<std::byte> manifest_bytes;
  if (failure.empty()) {
    manifest.has_checksums = true;
    manifest_bytes = serialize_manifest(manifest);
    const std::string manifest_key = model_manifest_key(key);
    items.push_back({manifest_key, manifest_bytes});
    flush();
  }
  if (!failure.empty()) {
    manifest.has_checksums = false;
    for (auto& f : manifest.files)
      for (auto& b : f.blocks) b.checksum = 0;
    // Unregistered blocks would sit in the pool where no model eviction ever finds them.
    try {
      pool_.remove(options_.ns, sent);
    } catch (const std::exception&) {
      // Best effort: the pool failing is why we are here.
    }
    pool_.register_model(key, options_.ns, {}, {}, 0, failure);
    return failure;
  }
  auto keys = manifest.block_keys();
  keys.push_back(model_manifest_key(key));
  pool_.register_model(key, options_.ns, manifest_bytes, keys,
                       manifest.total_bytes() + manifest_bytes.size());
  return {};
}

std::vector<std::byte> model_cache::read_block(const std::string& folder, const model_file& file,
                                               const model_block& block, bool verify) {
  std::vector<std::byte> data;
  try {
    data = store_.read(join(folder, file.name), block.offset, block.length);
  } catch (const std::exception& e) {
    throw object_store_failure("model cache: reading " + block.key + ": " + e.what());
  }
  bytes_from_store_.fetch_add(block.length, std::memory_order_relaxed);
  if (verify && model_block_checksum(data) != block.checksum)
    throw object_store_failure(
        "model cache: " + (store_.folder() / join(folder, file.name)).string() + " changed under " +
        block.key + ": bytes at offset " + std::to_string(block.offset) +
        " differ from the registered model");
  return data;
}

std::filesystem::path model_cache::copy_from_store(const model_manifest& manifest,
                                                   const std::string& folder,
                                                   const std::filesystem::path& local_dir) {
  const auto dir = local_dir / manifest.key();
  model_output out(dir, manifest);
  for (size_t f = 0; f < manifest.files.size(); ++f) {
    const auto& file = manifest.files[f];
    for (const auto& block : file.blocks)
      out.write(f, block.offset, read_block(folder, file, block, manifest.has_checksums));
  }
  out.commit();
  return dir;
}

std::filesystem::path model_cache::copy_from_pool(const model_manifest& manifest,
                                                  const std::string& folder,
                                                  const std::filesystem::path& local_dir) {
  struct block_ref {
    size_t file = 0;
    const model_block* block = nullptr;
  };
  std::vector<block_ref> refs;
  refs.reserve(manifest.block_count());
  for (size_t f = 0; f < manifest.files.size(); ++f)
    for (const auto& b : manifest.files[f].blocks) refs.push_back({f, &b});

  const auto dir = local_dir / manifest.key();
  model_output out(dir, manifest);
  bool pool_up = true;
  std::vector<std::string> keys;
  for (size_t first = 0; first < refs.size();) {
    size_t last = first, bytes = 0;
    keys.clear();
    while (last < refs.size() &&
           (last == first || bytes + refs[last].block->length <= options_.batch_bytes)) {
      bytes += refs[last].block->length;
      keys.push_back(refs[last].block->key);
      ++last;
    }
    pool_get_outcome got;
    if (pool_up) {
      try {
        got = pool_.get(options_.ns, keys);
      } catch (const std::exception&) {
        pool_up = false;
        pool_failures_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    for (size_t i = first; i < last; ++i) {
      const auto& ref = refs[i];
      const size_t slot = i - first;
      const bool have = pool_up && slot < got.blocks.size() && got.blocks[slot];
      if (have && got.blocks[slot]->size() == ref.block->length &&
          model_block_checksum(*got.blocks[slot]) == ref.block->checksum) {
        out.write(ref.file, ref.block->offset, *got.blocks[slot]);
        bytes_from_pool_.fetch_add(ref.block->length, std::memory_order_relaxed);
        continue;
      }
      fallback_blocks_.fetch_add(1, std::memory_order_relaxed);
      out.write(ref.file, ref.block->offset,
                read_block(folder, manifest.files[ref.file], *ref.block, true));
    }
    first = last;
  }
  out.commit();
  return dir;
}

std::filesystem::path model_cache::load(const std::string& model_id, const std::string& folder,
                                        const std::filesystem::path& local_dir) {
  load_timer timer(ns_, loads_);
  const auto plan = plan_model_blocks(store_, folder, model_id, options_.block_bytes);
  prefetch_result prefetched;
  try {
    prefetched = prefetch_planned(plan, folder);
  } catch (const object_store_failure&) {
    throw;
  } catch (const std::exception&) {
    // The controller cannot be reached or its registry is broken: do without the pool.
    pool_failures_.fetch_add(1, std::memory_order_relaxed);
    return copy_from_store(plan, folder, local_dir);
  }
  if (!prefetched.failure.empty()) {
    // Our own fetch could not put the model into the pool; nothing to read back from it.
    pool_failures_.fetch_add(1, std::memory_order_relaxed);
    return copy_from_store(plan, folder, local_dir);
  }
  return copy_from_pool(prefetched.manifest, folder, local_dir);
}

std::filesystem::path model_cache::load_from_object_store(const std::string& model_id,
                                                          const std::string& folder,
                                                          const std::filesystem::path& local_dir) {
  load_timer timer(ns_, loads_);
  return copy_from_store(plan_model_blocks(store_, folder, model_id, options_.block_bytes), folder,
                         local_dir);
}

model_cache_stats model_cache::stats() const {
  model_cache_stats s;
  s.bytes_from_pool = bytes_from_pool_.load(std::memory_order_relaxed);
  s.bytes_from_object_store = bytes_from_store_.load(std::memory_order_relaxed);
  s.fallback_blocks = fallback_blocks_.load(std::memory_order_relaxed);
  s.pool_failures = pool_failures_.load(std::memory_order_relaxed);
  s.fetches = fetches_.load(std::memory_order_relaxed);
  s.put_retries = put_retries_.load(std::memory_order_relaxed);
  s.loads = loads_.load(std::memory_order_relaxed);
  s.seconds = static_cast<double>(ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

} // namespace supernode::services::ems
