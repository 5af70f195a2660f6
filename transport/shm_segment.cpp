#include "transport/shm_segment.hpp"

#include "transport/shm_sync.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace supernode::transport {

namespace {

constexpr uint64_t segment_magic = 0x47455348444F4E53ull; // "SNODHSEG"
constexpr uint32_t layout_version = 1;
// A leftover nobody can read is removed only once it is this old, so a segment that is being
// created right now (header not yet written) is never mistaken for garbage.
constexpr int garbage_grace_seconds = 10;

struct segment_header {
  std::atomic<uint64_t> magic; // stored last by the creator (release): openers see a full header
  uint32_t version;
  uint32_t kind;
  uint64_t total_bytes;
  int32_t creator_pid;
  uint32_t creator_locks; // 1: the creator holds a shared flock on the segment while it lives
  uint64_t creator_start;
  std::atomic<uint32_t> closed;
};
static_assert(sizeof(segment_header) <= segment_header_bytes);

segment_header* header_of(void* base) {
  return static_cast<segment_header*>(base);
}

std::string errno_text() {
  return std::strerror(errno);
}

struct mapped {
  void* base = nullptr;
  size_t bytes = 0;
  ino_t inode = 0;
};

// Maps and validates an existing segment; `kind` 0 accepts any kind.
mapped map_existing(const std::string& full, int fd, uint32_t kind) {
  struct stat st {};
  if (fstat(fd, &st) != 0)
    throw shm_error("shm segment " + full + ": fstat failed: " + errno_text());
  const auto size = static_cast<size_t>(st.st_size);
  if (size < segment_header_bytes)
    throw shm_error("shm segment " + full + " is truncated: " + std::to_string(size) +
                    " bytes, smaller than its " + std::to_string(segment_header_bytes) +
                    "-byte header");
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) throw shm_error("shm segment " + full + ": mmap failed: " + errno_text());
  auto fail = [&](const std::string& why) {
    munmap(base, size);
    throw shm_error("shm segment " + full + ": " + why);
  };
  const auto* h = header_of(base);
  if (h->magic.load(std::memory_order_acquire) != segment_magic)
    fail("bad magic: not a supernode segment, or its creator has not finished creating it");
  if (h->version != layout_version)
    fail("layout version " + std::to_string(h->version) + ", expected " +
         std::to_string(layout_version));
  if (h->total_bytes != size)
    fail("truncated or resized: header says " + std::to_string(h->total_bytes) +
         " bytes, file has " + std::to_string(size));
  if (kind != 0 && h->kind != kind)
    fail(std::string("is a ") + to_string(static_cast<segment_kind>(h->kind)) + ", expected a " +
         to_string(static_cast<segment_kind>(kind)));
  return {base, size, st.st_ino};
}

// Whether the segment's creator lives. A creator holds a shared flock on the segment for its
// whole life and the kernel drops it when the creator dies, however it dies, so the lock answers
// across PID namespaces (containers), where a pid names nothing. Taking the lock exclusively
// for an instant tells: refused, the creator lives. Segments without the lock (an older
// creator) are judged by pid and start time.
bool creator_lives(const segment_header& h, int fd) {
  if (h.creator_locks != 1 || fd < 0) return process_alive(h.creator_pid, h.creator_start);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) return errno == EWOULDBLOCK || errno == EINTR;
  ::flock(fd, LOCK_UN);
  return false;
}

enum class leftover { missing, foreign, alive, stale, garbage_young, garbage_old };

// What a segment name currently holds, without keeping it mapped. A segment of another user is
// never judged stale: this user removes only its own (another user's process may live in a pid
// namespace we cannot see, and its segments are not ours to delete).
leftover inspect(const std::string& full, std::string* detail = nullptr, pid_t* creator = nullptr) {
  const int fd = shm_open(full.c_str(), O_RDWR, 0);
  if (fd < 0) return errno == EACCES ? leftover::foreign : leftover::missing;
  if (struct stat st{}; fstat(fd, &st) == 0 && st.st_uid != geteuid()) {
    if (detail) *detail = "owned by uid " + std::to_string(st.st_uid);
    close(fd);
    return leftover::foreign;
  }
  leftover result;
  try {
    auto m = map_existing(full, fd, 0);
    const auto* h = header_of(m.base);
    const bool alive = creator_lives(*h, fd);
    if (detail) *detail = "pid " + std::to_string(h->creator_pid);
    if (creator) *creator = h->creator_pid;
    munmap(m.base, m.bytes);
    result = alive ? leftover::alive : leftover::stale;
  } catch (const shm_error& e) {
    struct stat st {};
    const bool old =
        fstat(fd, &st) == 0 && std::time(nullptr) - st.st_mtime > garbage_grace_seconds;
    if (detail) *detail = e.what();
    result = old ? leftover::garbage_old : leftover::garbage_young;
  }
  close(fd);
  return result;
}

} // namespace

const char* to_string(segment_kind k) {
  switch (k) {
  case segment_kind::ring:
    return "ring";
  case segment_kind::inbox:
    return "inbox";
  case segment_kind::region:
    return "region";
  }
  return "segment of unknown kind";
}

void check_name_part(std::string_view what, std::string_view s) {
  bool ok = !s.empty() && s.size() <= 64;
  for (char c : s)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-');
  if (!ok)
    throw std::invalid_argument(std::string(what) + " '" + std::string(s) +
                                "' is not a valid shm name part: use 1-64 of [A-Za-z0-9_-]");
}

std::string shm_segment::full_name(std::string_view cluster, std::string_view name) {
  return "/supernode." + std::string(cluster) + "." + std::string(name);
}

shm_segment& shm_segment::operator=(shm_segment&& other) noexcept {
  if (this != &other) {
    release();
    base_ = std::exchange(other.base_, nullptr);
    total_bytes_ = std::exchange(other.total_bytes_, 0);
    name_ = std::move(other.name_);
    creator_ = std::exchange(other.creator_, false);
    inode_ = std::exchange(other.inode_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

shm_segment::~shm_segment() {
  release();
}

void shm_segment::release() {
  if (!base_) return;
  if (creator_) unlink();
  munmap(base_, total_bytes_);
  base_ = nullptr;
  if (fd_ >= 0) ::close(fd_); // a creator's lock goes with it
  fd_ = -1;
}

void shm_segment::unlink() {
  // Only our own inode: after a crash another process may own a new segment of this name.
  struct stat st {};
  const std::string path = "/dev/shm" + name_;
  if (::stat(path.c_str(), &st) == 0 && st.st_ino == inode_ && st.st_uid == geteuid())
    shm_unlink(name_.c_str());
  creator_ = false;
}

shm_segment shm_segment::create(std::string_view cluster, std::string_view name, segment_kind kind,
                                size_t data_bytes) {
  check_name_part("cluster", cluster);
  const std::string full = full_name(cluster, name);
  const size_t total = segment_header_bytes + data_bytes;
  int fd = -1;
  for (int attempt = 0; attempt < 3 && fd < 0; ++attempt) {
    fd = shm_open(full.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 || errno != EEXIST) break;
    std::string detail;
    switch (inspect(full, &detail)) {
    case leftover::alive:
      throw shm_error("shm segment " + full + " already exists and its creator (" + detail +
                      ") is alive");
    case leftover::foreign:
      throw shm_error("shm segment " + full + " already exists and belongs to another user (" +
                      (detail.empty() ? "not readable by this one" : detail) + ")");
    case leftover::garbage_young:
      throw shm_error("shm segment " + full + " already exists and is unreadable (" + detail +
                      "); another process may be creating it");
    case leftover::stale:
    case leftover::garbage_old:
      shm_unlink(full.c_str());
      break;
    case leftover::missing:
      break;
    }
  }
  if (fd < 0) throw shm_error("shm segment " + full + ": shm_open failed: " + errno_text());
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    const std::string why = errno_text();
    close(fd);
    shm_unlink(full.c_str());
    throw shm_error("shm segment " + full + ": ftruncate to " + std::to_string(total) +
                    " bytes failed: " + why);
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  struct stat st {};
  fstat(fd, &st);
  // Held until this process closes the descriptor or dies (shm_open's descriptors close on
  // exec, so a child started from here does not hold it).
  const bool locked = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
  if (base == MAP_FAILED) {
    close(fd);
    shm_unlink(full.c_str());
    throw shm_error("shm segment " + full + ": mmap failed: " + errno_text());
  }
  auto* h = new (base) segment_header{};
  h->version = layout_version;
  h->kind = static_cast<uint32_t>(kind);
  h->total_bytes = total;
  h->creator_pid = getpid();
  h->creator_start = process_start_time(getpid());
  h->creator_locks = locked ? 1 : 0;
  h->magic.store(segment_magic, std::memory_order_release);

  shm_segment s;
  s.base_ = base;
  s.total_bytes_ = total;
  s.name_ = full;
  s.creator_ = true;
  s.inode_ = st.st_ino;
  s.fd_ = fd;
  return s;
}

std::optional<shm_segment> shm_segment::try_open(std::string_view cluster, std::string_view name,
                                                 segment_kind kind) {
  check_name_part("cluster", cluster);
  const std::string full = full_name(cluster, name);
  const int fd = shm_open(full.c_str(), O_RDWR, 0);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw shm_error("shm segment " + full + ": shm_open failed: " + errno_text());
  }
  mapped m;
  try {
    // Every process of a cluster runs as its user: a segment of another user under the cluster's
    // name is someone else's plant, never a peer.
    if (struct stat st{}; fstat(fd, &st) == 0 && st.st_uid != geteuid())
      throw shm_error("shm segment " + full + " belongs to uid " + std::to_string(st.st_uid) +
                      ", not to this user (uid " + std::to_string(geteuid()) + "): not opened");
    m = map_existing(full, fd, static_cast<uint32_t>(kind));
  } catch (...) {
    close(fd);
    throw;
  }
  shm_segment s;
  s.base_ = m.base;
  s.total_bytes_ = m.bytes;
  s.name_ = full;
  s.inode_ = m.inode;
  s.fd_ = fd; // kept: its flock asks whether the creator lives
  return s;
}

shm_segment shm_segment::open(std::string_view cluster, std::string_view name, segment_kind kind) {
  auto s = try_open(cluster, name, kind);
  if (!s) throw shm_error("shm segment " + full_name(cluster, name) + " does not exist");
  return std::move(*s);
}

pid_t shm_segment::creator_pid() const {
  return header_of(base_)->creator_pid;
}

uint64_t shm_segment::creator_start() const {
  return header_of(base_)->creator_start;
}

bool shm_segment::creator_alive() const {
  // Never the probe on the creator's own descriptor: taking its shared lock exclusively would
  // upgrade it, and unlocking would drop it.
  return creator_ || creator_lives(*header_of(base_), fd_);
}

void shm_segment::mark_closed() {
  header_of(base_)->closed.store(1, std::memory_order_release);
}

bool shm_segment::closed() const {
  return header_of(base_)->closed.load(std::memory_order_acquire) != 0;
}

std::vector<std::string> list_segments(std::string_view cluster) {
  std::vector<std::string> out;
  const std::string prefix = "supernode." + std::string(cluster) + ".";
  DIR* d = opendir("/dev/shm");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.emplace_back(e->d_name);
  }
  closedir(d);
  return out;
}

size_t cleanup_stale_segments(std::string_view cluster) {
  check_name_part("cluster", cluster);
  size_t removed = 0;
  for (const auto& name : list_segments(cluster)) {
    const std::string full = "/" + name;
    const auto state = inspect(full);
    if (state == leftover::stale || state == leftover::garbage_old)
      removed += shm_unlink(full.c_str()) == 0;
  }
  return removed;
}

std::vector<std::string> cleanup_segments_of(std::string_view cluster, pid_t creator) {
  check_name_part("cluster", cluster);
  std::vector<std::string> removed;
  for (const auto& name : list_segments(cluster)) {
    const std::string full = "/" + name;
    pid_t owner = 0;
    if (inspect(full, nullptr, &owner) == leftover::stale && owner == creator &&
        shm_unlink(full.c_str()) == 0)
      removed.push_back(name);
  }
  return removed;
}

} // namespace supernode::transport
