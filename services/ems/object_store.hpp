#pragma once
// "Object storage" for cold model loads (§4.4): a folder standing in for a bucket, read through
// a bandwidth cap (the paper assumes 2.5 GB/s per bucket). The cap belongs to the bucket, not to
// a reader, so every process on this host reading the same folder shares it: a token bucket in a
// small shared-memory file named from the folder's canonical path holds the next free instant
// (CLOCK_MONOTONIC ns). A read of n bytes reserves n/bw seconds starting at max(now, next free)
// with a CAS, then sleeps until its reservation ends. Reads go in chunks so concurrent readers
// interleave instead of queueing behind one another's whole files. Thread-safe.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace supernode::services::ems {

struct object_store_stats {
  uint64_t bytes_read = 0;     // by read/read_into: model data
  uint64_t metadata_bytes = 0; // by read_metadata: headers and small files, for plans
  uint64_t reads = 0;          // calls of either kind
  double seconds_waited = 0;   // asleep for the cap
};

class object_store {
public:
  static constexpr size_t default_chunk_bytes = 4ull << 20;

  // bytes_per_second = 0 means unlimited (no shared file). Throws std::invalid_argument for a
  // negative or non-finite cap or a zero chunk, and std::runtime_error naming the folder when it
  // is not a directory or the shared throttle file cannot be created or mapped.
  object_store(std::filesystem::path folder, double bytes_per_second,
               size_t chunk_bytes = default_chunk_bytes);
  ~object_store();
  object_store(const object_store&) = delete;
  object_store& operator=(const object_store&) = delete;

  const std::filesystem::path& folder() const { return folder_; }
  double bytes_per_second() const { return bytes_per_second_; }
  // The shared token bucket (in /dev/shm when it exists); empty when unlimited. Left in place
  // on destruction because other processes may still use it; tests remove their own.
  const std::filesystem::path& throttle_file() const { return throttle_path_; }

  // Paths below are relative to folder(): no absolute paths, no "..", else
  // std::invalid_argument. Errors (missing file, short read) throw std::runtime_error naming the
  // file.
  //
  // Names of the regular files directly in `dir` (not recursing), sorted.
  std::vector<std::string> list(const std::string& dir = {}) const;
  uint64_t file_size(const std::string& path) const;
  // Exactly `length` bytes from `offset`, paced by the cap.
  std::vector<std::byte> read(const std::string& path, uint64_t offset, uint64_t length);
  void read_into(const std::string& path, uint64_t offset, std::span<std::byte> out);
  // The same paced read, counted as metadata_bytes: what a plan or a version fingerprint costs,
  // kept apart so "the model's bytes left the bucket once" stays checkable.
  std::vector<std::byte> read_metadata(const std::string& path, uint64_t offset, uint64_t length);

  object_store_stats stats() const;

private:
  std::filesystem::path resolve(const std::string& path) const;
  void paced_read(const std::string& path, uint64_t offset, std::span<std::byte> out,
                  bool metadata);
  // Reserves the cap for n bytes; returns the CLOCK_MONOTONIC ns at which the reservation ends.
  uint64_t reserve(size_t n);

  std::filesystem::path folder_;
  double bytes_per_second_ = 0;
  size_t chunk_bytes_ = default_chunk_bytes;
  std::filesystem::path throttle_path_;
  void* throttle_map_ = nullptr; // one uint64_t: the next free instant, shared by processes

  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> metadata_bytes_{0};
  std::atomic<uint64_t> reads_{0};
  std::atomic<uint64_t> ns_waited_{0};
};

} // namespace supernode::services::ems
