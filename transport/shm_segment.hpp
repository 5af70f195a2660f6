#pragma once
// POSIX shared-memory segments of one cluster, named "/supernode.<cluster>.<name>". The creator
// stamps its pid and process start time into a header page and holds a shared flock on the
// segment while it lives (the kernel drops it when the creator dies, in any PID namespace, so
// containers sharing /dev/shm tell a dead peer's segments apart); a segment whose creator is dead
// is stale and `cleanup_stale_segments` removes it, so a crashed run leaves nothing behind once the
// next run starts. A clean exit unlinks in the creator's destructor. Openers never trust the
// file: owner (this user), size, magic, layout version and kind are checked and a mismatch
// names the segment. Segments are created 0600, and only this user's are ever removed.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace supernode::transport {

struct shm_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class segment_kind : uint32_t { ring = 1, inbox = 2, region = 3 };
const char* to_string(segment_kind k);

// The data area starts one page in, so rings and regions are page-aligned.
inline constexpr size_t segment_header_bytes = 4096;

class shm_segment {
public:
  shm_segment() = default;
  shm_segment(shm_segment&& other) noexcept { *this = std::move(other); }
  shm_segment& operator=(shm_segment&& other) noexcept;
  shm_segment(const shm_segment&) = delete;
  shm_segment& operator=(const shm_segment&) = delete;
  // Unmaps; the creator also unlinks (if the name still points at this segment).
  ~shm_segment();

  // Creates a zero-filled segment with `data_bytes` after the header. A leftover of the same
  // name whose creator is dead is replaced; one whose creator lives is an error.
  static shm_segment create(std::string_view cluster, std::string_view name, segment_kind kind,
                            size_t data_bytes);
  // Maps an existing segment; nothing when it does not exist, shm_error when it is not a valid
  // segment of this kind (garbage, truncated, still being created).
  static std::optional<shm_segment> try_open(std::string_view cluster, std::string_view name,
                                             segment_kind kind);
  static shm_segment open(std::string_view cluster, std::string_view name, segment_kind kind);

  static std::string full_name(std::string_view cluster, std::string_view name);

  bool valid() const { return base_ != nullptr; }
  std::byte* data() const { return static_cast<std::byte*>(base_) + segment_header_bytes; }
  size_t data_bytes() const { return total_bytes_ - segment_header_bytes; }
  const std::string& name() const { return name_; }
  bool is_creator() const { return creator_; }
  pid_t creator_pid() const;
  uint64_t creator_start() const; // the creator's start time, with its pid naming one process
  bool creator_alive() const;
  // A flag openers read to learn the creator has shut down cleanly.
  void mark_closed();
  bool closed() const;
  // Removes the name now (the mapping stays valid); used for a dead creator's leftovers.
  void unlink();

private:
  void release();

  void* base_ = nullptr;
  size_t total_bytes_ = 0;
  std::string name_;
  bool creator_ = false;
  ino_t inode_ = 0;
  int fd_ = -1; // the creator's holds its flock; an opener's asks about it
};

// Removes the segments of `cluster` whose creator process is dead (and unreadable leftovers
// older than a few seconds, from a crash between create and header write), of this user only:
// another user's segments stay whatever they hold. Returns how many.
size_t cleanup_stale_segments(std::string_view cluster);

// Removes the segments of `cluster` that process `creator` created, once it is dead (its pid and
// start time in their headers no longer name a live process), of this user only: what a
// supervisor cleans after one process of a running cluster died, leaving every other process's
// segments alone. The names go; peers that still map one keep their mapping until they drop it.
// Returns the names removed (without the leading '/').
std::vector<std::string> cleanup_segments_of(std::string_view cluster, pid_t creator);

// The segment names of `cluster` currently in /dev/shm (without the leading '/').
std::vector<std::string> list_segments(std::string_view cluster);

// Cluster and peer names become parts of file names: [A-Za-z0-9_-], 1..64 characters.
void check_name_part(std::string_view what, std::string_view s);

} // namespace supernode::transport
