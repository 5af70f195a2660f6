#include "services/ems/object_store.hpp"

#include "services/ems/hash_ring.hpp"
#include "transport/storage_faults.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <time.h>
#include <unistd.h>

namespace supernode::services::ems {

namespace {

constexpr size_t throttle_bytes = 64; // one cache line; the first 8 bytes are the bucket
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free,
              "the shared token bucket needs an address-free 64-bit atomic");

std::string errno_text() {
  return std::strerror(errno);
}

uint64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void sleep_until_ns(uint64_t deadline) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(deadline / 1'000'000'000ull);
  ts.tv_nsec = static_cast<long>(deadline % 1'000'000'000ull);
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {}
}

// Every reader of the same folder on this host must find the same file, whatever path it was
// given (relative, through a symlink), hence the canonical path.
std::filesystem::path throttle_path_for(const std::filesystem::path& canonical_folder) {
  std::error_code ec;
  std::filesystem::path dir = "/dev/shm";
  if (!std::filesystem::is_directory(dir, ec)) dir = std::filesystem::temp_directory_path();
  return dir / ("supernode-objstore-" + hex16(stable_hash(canonical_folder.native())) + ".bw");
}

class file_handle {
public:
  explicit file_handle(int fd) : fd_(fd) {}
  ~file_handle() {
    if (fd_ >= 0) ::close(fd_);
  }
  file_handle(const file_handle&) = delete;
  file_handle& operator=(const file_handle&) = delete;
  int get() const { return fd_; }

private:
  int fd_;
};

} // namespace

object_store::object_store(std::filesystem::path folder, double bytes_per_second,
                           size_t chunk_bytes)
    : bytes_per_second_(bytes_per_second), chunk_bytes_(chunk_bytes) {
  if (!std::isfinite(bytes_per_second) || bytes_per_second < 0)
    throw std::invalid_argument("object store: bandwidth cap must be >= 0 bytes/s, got " +
                                std::to_string(bytes_per_second));
  if (chunk_bytes == 0) throw std::invalid_argument("object store: chunk_bytes must be > 0");
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec))
    throw std::runtime_error("object store: " + folder.string() + " is not a directory");
  folder_ = std::filesystem::canonical(folder, ec);
  if (ec)
    throw std::runtime_error("object store: cannot resolve " + folder.string() + ": " +
                             ec.message());
  if (bytes_per_second_ == 0) return;

  throttle_path_ = throttle_path_for(folder_);
  const int fd = ::open(throttle_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0)
    throw std::runtime_error("object store: cannot open throttle file " + throttle_path_.string() +
                             " for " + folder_.string() + ": " + errno_text());
  file_handle handle(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw std::runtime_error("object store: cannot stat " + throttle_path_.string() + ": " +
                             errno_text());
  // Growing a file zero-fills it, and a second process growing it to the same size changes
  // nothing, so racing creators agree on an initial "free since time 0".
  if (static_cast<size_t>(st.st_size) < throttle_bytes &&
      ::ftruncate(fd, static_cast<off_t>(throttle_bytes)) != 0)
    throw std::runtime_error("object store: cannot size " + throttle_path_.string() + ": " +
                             errno_text());
  void* map = ::mmap(nullptr, throttle_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED)
    throw std::runtime_error("object store: cannot map " + throttle_path_.string() + ": " +
                             errno_text());
  throttle_map_ = map;
}

object_store::~object_store() {
  if (throttle_map_) ::munmap(throttle_map_, throttle_bytes);
}

std::filesystem::path object_store::resolve(const std::string& path) const {
  const std::filesystem::path rel(path);
  if (rel.is_absolute())
    throw std::invalid_argument("object store: path " + path + " must be relative to " +
                                folder_.string());
  for (const auto& part : rel)
    if (part == "..")
      throw std::invalid_argument("object store: path " + path + " leaves " + folder_.string());
  return path.empty() ? folder_ : folder_ / rel;
}

std::vector<std::string> object_store::list(const std::string& dir) const {
  const auto full = resolve(dir);
  std::error_code ec;
  std::vector<std::string> names;
  std::filesystem::directory_iterator it(full, ec), end;
  if (ec)
    throw std::runtime_error("object store: cannot list " + full.string() + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    if (it->is_regular_file(ec)) names.push_back(it->path().filename().string());
  }
  if (ec)
    throw std::runtime_error("object store: cannot list " + full.string() + ": " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t object_store::file_size(const std::string& path) const {
  const auto full = resolve(path);
  std::error_code ec;
  const auto size = std::filesystem::file_size(full, ec);
  if (ec)
    throw std::runtime_error("object store: cannot size " + full.string() + ": " + ec.message());
  return size;
}

std::vector<std::byte> object_store::read(const std::string& path, uint64_t offset,
                                          uint64_t length) {
  std::vector<std::byte> out(length);
  paced_read(path, offset, out, false);
  return out;
}

void object_store::read_into(const std::string& path, uint64_t offset, std::span<std::byte> out) {
  paced_read(path, offset, out, false);
}

std::vector<std::byte> object_store::read_metadata(const std::string& path, uint64_t offset,
                                                   uint64_t length) {
  std::vector<std::byte> out(length);
  paced_read(path, offset, out, true);
  return out;
}

uint64_t object_store::reserve(size_t n) {
  // Rounded up, so n bytes never cost less than n/bw: the cap is a bound, not an average.
  const auto cost =
      static_cast<uint64_t>(std::ceil(static_cast<double>(n) * 1e9 / bytes_per_second_));
  std::atomic_ref<uint64_t> next_free(*static_cast<uint64_t*>(throttle_map_));
  uint64_t seen = next_free.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t start = std::max(monotonic_ns(), seen);
    if (next_free.compare_exchange_weak(seen, start + cost, std::memory_order_acq_rel,
                                        std::memory_order_relaxed))
      return start + cost;
  }
}

void object_store::paced_read(const std::string& path, uint64_t offset, std::span<std::byte> out,
                              bool metadata) {
  // A chaos run's slow_store fault (transport/storage_faults.hpp): this read is that much later.
  if (auto slow = transport::active_storage_fault(transport::storage_fault_kind::slow_store))
    std::this_thread::sleep_for(std::chrono::milliseconds(slow->delay_ms));
  const auto full = resolve(path);
  reads_.fetch_add(1, std::memory_order_relaxed);
  const int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("object store: cannot open " + full.string() + ": " + errno_text());
  file_handle handle(fd);

  size_t done = 0;
  while (done < out.size()) {
    const size_t chunk = std::min(chunk_bytes_, out.size() - done);
    const uint64_t until = throttle_map_ ? reserve(chunk) : 0;
    size_t got = 0;
    while (got < chunk) {
      const ssize_t n = ::pread(fd, out.data() + done + got, chunk - got,
                                static_cast<off_t>(offset + done + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        throw std::runtime_error("object store: cannot read " + full.string() + " at offset " +
                                 std::to_string(offset + done + got) + ": " + errno_text());
      if (n == 0)
        throw std::runtime_error("object store: short read of " + full.string() + ": wanted " +
                                 std::to_string(out.size()) + " bytes at offset " +
                                 std::to_string(offset) + ", file ends after " +
                                 std::to_string(done + got));
      got += static_cast<size_t>(n);
    }
    (metadata ? metadata_bytes_ : bytes_read_).fetch_add(chunk, std::memory_order_relaxed);
    done += chunk;
    if (throttle_map_) {
      const uint64_t now = monotonic_ns();
      if (until > now) {
        sleep_until_ns(until);
        ns_waited_.fetch_add(monotonic_ns() - now, std::memory_order_relaxed);
      }
    }
  }
}

object_store_stats object_store::stats() const {
  object_store_stats s;
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.metadata_bytes = metadata_bytes_.load(std::memory_order_relaxed);
  s.reads = reads_.load(std::memory_order_relaxed);
  s.seconds_waited = static_cast<double>(ns_waited_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

} // namespace supernode::services::ems
