#include "services/ems/block_store.hpp"

#include "services/ems/block_checksum.hpp"
#include "services/ems/hash_ring.hpp"
#include "transport/private_files.hpp"
#include "transport/storage_faults.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace supernode::services::ems {

namespace {

constexpr char file_magic[8] = {'E', 'M', 'S', 'B', 'L', 'K', '0', '1'};
// magic, seq, ns length, key length, data length, checksum.
constexpr size_t header_bytes = 8 + 5 * 8;
constexpr std::string_view block_suffix = ".blk";
constexpr std::string_view temp_suffix = ".tmp";

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

std::string errno_text() {
  return std::strerror(errno);
}

void put_u64(std::vector<std::byte>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

uint64_t get_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

uint64_t file_size_for(std::string_view ns, std::string_view key, uint64_t data) {
  return header_bytes + ns.size() + key.size() + data;
}

// Whole file, or nullopt with `error` set; short files are the caller's to judge.
std::optional<std::vector<std::byte>> slurp(const std::filesystem::path& path, std::string& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "open " + path.string() + ": " + errno_text();
    return std::nullopt;
  }
  std::vector<std::byte> out;
  struct stat st {};
  if (::fstat(fd, &st) == 0) out.reserve(static_cast<size_t>(st.st_size));
  std::byte buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = "read " + path.string() + ": " + errno_text();
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

struct parsed_file {
  std::string ns;
  std::string key;
  uint64_t seq = 0;
  uint64_t checksum = 0;
  std::span<const std::byte> data;
};

// nullopt for anything but a complete, self-consistent block whose checksum matches.
std::optional<parsed_file> parse_block(std::span<const std::byte> bytes) {
  if (bytes.size() < header_bytes || std::memcmp(bytes.data(), file_magic, 8) != 0)
    return std::nullopt;
  parsed_file f;
  f.seq = get_u64(bytes.data() + 8);
  const uint64_t ns_len = get_u64(bytes.data() + 16);
  const uint64_t key_len = get_u64(bytes.data() + 24);
  const uint64_t data_len = get_u64(bytes.data() + 32);
  f.checksum = get_u64(bytes.data() + 40);
  const uint64_t body = bytes.size() - header_bytes;
  // Compared one at a time so huge lengths cannot overflow the sum.
  if (ns_len > body || key_len > body - ns_len || data_len != body - ns_len - key_len)
    return std::nullopt;
  const auto* p = reinterpret_cast<const char*>(bytes.data() + header_bytes);
  f.ns.assign(p, ns_len);
  f.key.assign(p + ns_len, key_len);
  f.data = bytes.subspan(header_bytes + ns_len + key_len);
  if (block_checksum(f.ns, f.key, f.data) != f.checksum) return std::nullopt;
  return f;
}

} // namespace

// ---- block_store: construction and restart ---------------------------------------------------

namespace {

block_store_options checked(block_store_options o) {
  if (o.ssd_dir.empty()) throw std::invalid_argument("block_store: ssd_dir is empty");
  if (!(o.dram_high_watermark > 0.0 && o.dram_high_watermark <= 1.0))
    throw std::invalid_argument("block_store: dram_high_watermark must be in (0, 1], got " +
                                std::to_string(o.dram_high_watermark));
  if (o.ssd_bytes == 0) throw std::invalid_argument("block_store: ssd_bytes is 0");
  return o;
}

} // namespace

block_store::block_store(block_store_options options)
    : options_(checked(std::move(options))),
      arena_(options_.dram_memory.empty() ? dram_arena(options_.dram_bytes, options_.huge_pages)
                                          : dram_arena(options_.dram_memory)) {
  // Blocks are other requests' context: the folder is this user's alone (0700, refused when
  // another user owns it or anyone may write to it), and every block file is 0600.
  try {
    transport::ensure_private_dir(options_.ssd_dir);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("block_store: ssd_dir: ") + e.what());
  }
  dir_fd_ = ::open(options_.ssd_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0)
    throw std::runtime_error("block_store: cannot open ssd_dir " + options_.ssd_dir.string() +
                             ": " + errno_text());
  rebuild_from_dir();
}

block_store::~block_store() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void block_store::rebuild_from_dir() {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& de : std::filesystem::directory_iterator(options_.ssd_dir, ec))
    if (de.is_regular_file()) names.push_back(de.path().filename().string());
  if (ec)
    throw std::runtime_error("block_store: cannot list ssd_dir " + options_.ssd_dir.string() +
                             ": " + ec.message());
  std::sort(names.begin(), names.end()); // a deterministic tie-break below

  struct found {
    std::string name;
    parsed_file block;
    std::vector<std::byte> bytes; // backs block.data
  };
  std::vector<found> blocks;
  for (const auto& name : names) {
    const auto path = options_.ssd_dir / name;
    // A temp file is a put that never returned, so nobody was told it is persisted.
    if (name.ends_with(temp_suffix)) {
      std::filesystem::remove(path, ec);
      continue;
    }
    if (!name.ends_with(block_suffix)) continue; // not ours
    std::string error;
    auto bytes = slurp(path, error);
    std::optional<parsed_file> block;
    if (bytes) block = parse_block(*bytes);
    if (!block) {
      ++stats_.corrupt_blocks;
      std::filesystem::remove(path, ec);
      continue;
    }
    blocks.push_back({name, std::move(*block), std::move(*bytes)});
  }
  // Oldest put first, so the LRU lists come back in put order and a later duplicate wins.
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const found& a, const found& b) { return a.block.seq < b.block.seq; });
  for (auto& f : blocks) {
    auto& st = namespaces_[f.block.ns];
    auto [it, fresh] = st.blocks.try_emplace(f.block.key);
    entry& e = it->second;
    if (!fresh) {
      st.bytes -= e.size;
      const auto stale = options_.ssd_dir / e.file;
      detach_file(e);
      std::filesystem::remove(stale, ec);
    }
    e.ns = f.block.ns;
    e.key = f.block.key;
    e.size = f.block.data.size();
    e.checksum = f.block.checksum;
    e.seq = f.block.seq;
    st.bytes += e.size;
    attach_file(e, f.name, f.bytes.size());
    next_seq_ = std::max(next_seq_, e.seq + 1);
  }
  enforce_ssd_capacity(nullptr);
}

// ---- block_store: bookkeeping ----------------------------------------------------------------

block_store::entry* block_store::find(const std::string& ns, const std::string& key) {
  auto n = namespaces_.find(ns);
  if (n == namespaces_.end()) return nullptr;
  auto b = n->second.blocks.find(key);
  return b == n->second.blocks.end() ? nullptr : &b->second;
}

const block_store::entry* block_store::find(const std::string& ns, const std::string& key) const {
  return const_cast<block_store*>(this)->find(ns, key);
}

void block_store::touch(entry& e) {
  ssd_lru_.splice(ssd_lru_.end(), ssd_lru_, e.ssd_pos);
  if (e.dram_offset) dram_lru_.splice(dram_lru_.end(), dram_lru_, e.dram_pos);
}

std::string block_store::file_name_for(const std::string& ns, const std::string& key) const {
  const std::string base = hex16(key_hash(ns, key));
  for (uint64_t n = 0;; ++n) {
    std::string name = base + (n ? "-" + std::to_string(n) : "") + std::string(block_suffix);
    auto it = files_.find(name);
    if (it == files_.end() || (it->second->ns == ns && it->second->key == key)) return name;
  }
}

void block_store::attach_file(entry& e, const std::string& name, uint64_t file_bytes) {
  e.file = name;
  e.file_bytes = file_bytes;
  e.ssd_pos = ssd_lru_.insert(ssd_lru_.end(), &e);
  files_[name] = &e;
  ++stats_.ssd_blocks;
  stats_.ssd_bytes += file_bytes;
}

// Forgets the file without deleting it: the caller has replaced or removed it.
void block_store::detach_file(entry& e) {
  ssd_lru_.erase(e.ssd_pos);
  files_.erase(e.file);
  --stats_.ssd_blocks;
  stats_.ssd_bytes -= e.file_bytes;
  e.file.clear();
  e.file_bytes = 0;
}

void block_store::drop_dram_copy(entry& e) {
  if (!e.dram_offset) return;
  arena_.release(*e.dram_offset);
  dram_lru_.erase(e.dram_pos);
  e.dram_offset.reset();
  --stats_.dram_blocks;
  stats_.dram_bytes -= e.size;
}

// The SSD tier already holds every block, so leaving DRAM costs no write.
void block_store::evict_from_dram(entry& e) {
  drop_dram_copy(e);
  ++stats_.evictions_dram_to_ssd;
}

bool block_store::cache_in_dram(entry& e, std::span<const std::byte> data) {
  const size_t need = round_up(std::max<size_t>(data.size(), 1), dram_arena::alignment);
  const auto limit =
      static_cast<size_t>(std::floor(options_.dram_high_watermark * arena_.capacity()));
  if (need > limit) return false; // would cross the watermark even in an empty arena
  while (arena_.used_bytes() + need > limit && !dram_lru_.empty())
    evict_from_dram(*dram_lru_.front());
  auto offset = arena_.allocate(data.size());
  // Under the watermark yet fragmented: keep evicting LRU until a run is long enough.
  while (!offset && !dram_lru_.empty()) {
    evict_from_dram(*dram_lru_.front());
    offset = arena_.allocate(data.size());
  }
  if (!offset) return false;
  if (!data.empty()) std::memcpy(arena_.at(*offset), data.data(), data.size());
  e.dram_offset = offset;
  e.dram_pos = dram_lru_.insert(dram_lru_.end(), &e);
  ++stats_.dram_blocks;
  stats_.dram_bytes += e.size;
  return true;
}

void block_store::enforce_ssd_capacity(const entry* keep) {
  while (stats_.ssd_bytes > options_.ssd_bytes && !ssd_lru_.empty()) {
    entry* victim = ssd_lru_.front();
    if (victim == keep) {
      if (ssd_lru_.size() == 1) return;
      victim = *std::next(ssd_lru_.begin());
    }
    erase(*victim);
    ++stats_.ssd_deletions;
  }
}

void block_store::erase(entry& e) {
  drop_dram_copy(e);
  std::error_code ec;
  std::filesystem::remove(options_.ssd_dir / e.file, ec);
  detach_file(e);
  auto& st = namespaces_.at(e.ns);
  st.bytes -= e.size;
  const std::string key = e.key; // e dies with the erase
  st.blocks.erase(key);
}

// ---- block_store: files ----------------------------------------------------------------------

std::string block_store::write_file(const std::string& name, const entry& e,
                                    std::span<const std::byte> data) {
  std::vector<std::byte> header;
  header.reserve(header_bytes + e.ns.size() + e.key.size());
  for (char c : file_magic) header.push_back(static_cast<std::byte>(c));
  put_u64(header, e.seq);
  put_u64(header, e.ns.size());
  put_u64(header, e.key.size());
  put_u64(header, data.size());
  put_u64(header, e.checksum);
  for (char c : e.ns) header.push_back(static_cast<std::byte>(c));
  for (char c : e.key) header.push_back(static_cast<std::byte>(c));

  const auto tmp = options_.ssd_dir / (name + std::string(temp_suffix));
  const auto final_path = options_.ssd_dir / name;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return "open " + tmp.string() + ": " + errno_text();
  auto fail = [&](const std::string& what) {
    const std::string error = what + " " + tmp.string() + ": " + errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    return error;
  };
  for (auto part : {std::span<const std::byte>(header), data}) {
    while (!part.empty()) {
      // A chaos run's disk_full fault (transport/storage_faults.hpp) fails it as a full disk.
      const ssize_t n = transport::active_storage_fault(transport::storage_fault_kind::disk_full)
                            ? (errno = ENOSPC, -1)
                            : ::write(fd, part.data(), part.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail("write");
      part = part.subspan(static_cast<size_t>(n));
    }
  }
  if (::fsync(fd) != 0) return fail("fsync");
  if (::close(fd) != 0) {
    const std::string error = "close " + tmp.string() + ": " + errno_text();
    ::unlink(tmp.c_str());
    return error;
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const std::string error = "rename " + tmp.string() + ": " + errno_text();
    ::unlink(tmp.c_str());
    return error;
  }
  // The rename is durable only once the folder is; before that a crash could lose the block.
  if (::fsync(dir_fd_) != 0) return "fsync " + options_.ssd_dir.string() + ": " + errno_text();
  return {};
}

std::optional<std::vector<std::byte>> block_store::read_file(const entry& e, bool& corrupt) const {
  corrupt = false;
  std::string error;
  auto bytes = slurp(options_.ssd_dir / e.file, error);
  if (!bytes) return std::nullopt; // gone or unreadable: a miss, not corruption
  auto block = parse_block(*bytes);
  if (!block || block->ns != e.ns || block->key != e.key || block->checksum != e.checksum) {
    corrupt = true;
    return std::nullopt;
  }
  return std::vector<std::byte>(block->data.begin(), block->data.end());
}

// ---- block_store: API ------------------------------------------------------------------------

protocol::error block_store::reject(protocol::error error) {
  ++stats_.rejected_puts;
  return error;
}

put_result block_store::put(const std::string& ns, const std::string& key,
                            std::span<const std::byte> data) {
  put_result r;
  auto& st = namespaces_[ns];
  entry* old = find(ns, key);
  const uint64_t old_size = old ? old->size : 0;
  const uint64_t after = st.bytes - old_size + data.size();
  if (st.quota && after > *st.quota) {
    r.error = reject({protocol::ems_errc::quota_exceeded,
                      "block_store: put of '" + key + "' (" + std::to_string(data.size()) +
                          " bytes) would take namespace '" + ns + "' to " + std::to_string(after) +
                          " bytes, over its quota of " + std::to_string(*st.quota) + " bytes"});
    return r;
  }
  const uint64_t file_bytes = file_size_for(ns, key, data.size());
  if (file_bytes > options_.ssd_bytes) {
    r.error = reject(
        {protocol::ems_errc::too_large,
         "block_store: block '" + ns + "/" + key + "' needs " + std::to_string(file_bytes) +
             " bytes on the SSD tier, whose capacity is " + std::to_string(options_.ssd_bytes)});
    return r;
  }

  const uint64_t checksum = block_checksum(ns, key, data);
  if (old && old->size == data.size() && old->checksum == checksum) {
    // The same bytes again (two prefills of one prefix racing to store it): stored once.
    touch(*old);
    r.stored = r.persisted = true;
    r.in_dram = old->dram_offset.has_value();
    return r;
  }
  entry fresh;
  fresh.ns = ns;
  fresh.key = key;
  fresh.size = data.size();
  fresh.checksum = checksum;
  fresh.seq = next_seq_++;
  const std::string name = old ? old->file : file_name_for(ns, key);
  if (std::string error = write_file(name, fresh, data); !error.empty()) {
    r.error = reject({protocol::ems_errc::storage_failed,
                      "block_store: put of '" + ns + "/" + key + "' failed: " + error});
    return r;
  }

  if (old) { // the rename replaced its file in place
    drop_dram_copy(*old);
    detach_file(*old);
  }
  entry& e = old ? *old : st.blocks.emplace(key, entry{}).first->second;
  e.ns = ns;
  e.key = key;
  e.size = fresh.size;
  e.checksum = fresh.checksum;
  e.seq = fresh.seq;
  st.bytes = after;
  attach_file(e, name, file_bytes);
  enforce_ssd_capacity(&e);
  r.stored = r.persisted = true;
  r.in_dram = cache_in_dram(e, data);
  return r;
}

std::optional<std::vector<std::byte>> block_store::get(const std::string& ns,
                                                       const std::string& key) {
  entry* e = find(ns, key);
  if (!e) {
    ++stats_.misses;
    return std::nullopt;
  }
  if (e->dram_offset) {
    const std::byte* p = arena_.at(*e->dram_offset);
    std::vector<std::byte> out(p, p + e->size);
    if (block_checksum(ns, key, out) == e->checksum) {
      ++stats_.dram_hits;
      touch(*e);
      return out;
    }
    // The SSD copy was verified separately when written; it may still be good.
    ++stats_.corrupt_blocks;
    drop_dram_copy(*e);
  }
  bool corrupt = false;
  auto out = read_file(*e, corrupt);
  if (!out) {
    if (corrupt) ++stats_.corrupt_blocks;
    ++stats_.misses;
    erase(*e);
    return std::nullopt;
  }
  ++stats_.ssd_hits;
  touch(*e);
  cache_in_dram(*e, *out);
  return out;
}

std::optional<block_store::dram_ref> block_store::get_ref(const std::string& ns,
                                                          const std::string& key) {
  entry* e = find(ns, key);
  if (e && e->dram_offset) {
    ++stats_.dram_hits;
    touch(*e);
    return dram_ref{e->dram_offset, e->size, e->checksum, {}};
  }
  auto data = get(ns, key); // verified from the SSD tier, then cached in DRAM when it fits
  if (!data) return std::nullopt;
  e = find(ns, key);
  if (e && e->dram_offset) return dram_ref{e->dram_offset, e->size, e->checksum, {}};
  return dram_ref{std::nullopt, data->size(), block_checksum(ns, key, *data), std::move(*data)};
}

bool block_store::exists(const std::string& ns, const std::string& key) const {
  return find(ns, key) != nullptr;
}

bool block_store::remove(const std::string& ns, const std::string& key) {
  entry* e = find(ns, key);
  if (!e) return false;
  erase(*e);
  return true;
}

std::vector<put_result> block_store::put_many(const std::string& ns,
                                              std::span<const put_item> items) {
  std::vector<put_result> out;
  out.reserve(items.size());
  for (const auto& item : items) out.push_back(put(ns, item.key, item.data));
  return out;
}

std::vector<std::optional<std::vector<std::byte>>>
block_store::get_many(const std::string& ns, std::span<const std::string> keys) {
  std::vector<std::optional<std::vector<std::byte>>> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(get(ns, key));
  return out;
}

void block_store::set_quota(const std::string& ns, uint64_t bytes) {
  namespaces_[ns].quota = bytes;
}

void block_store::clear_quota(const std::string& ns) {
  auto it = namespaces_.find(ns);
  if (it != namespaces_.end()) it->second.quota.reset();
}

std::optional<uint64_t> block_store::quota(const std::string& ns) const {
  auto it = namespaces_.find(ns);
  return it == namespaces_.end() ? std::nullopt : it->second.quota;
}

uint64_t block_store::namespace_bytes(const std::string& ns) const {
  auto it = namespaces_.find(ns);
  return it == namespaces_.end() ? 0 : it->second.bytes;
}

std::vector<protocol::ems_namespace_usage> block_store::usage() const {
  std::vector<protocol::ems_namespace_usage> out;
  for (const auto& [ns, state] : namespaces_)
    if (!state.blocks.empty()) out.push_back({ns, state.bytes, state.blocks.size()});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ns < b.ns; });
  return out;
}

std::vector<std::string> block_store::keys(const std::string& ns) const {
  std::vector<std::string> out;
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return out;
  for (const auto& [key, e] : it->second.blocks) out.push_back(key);
  std::sort(out.begin(), out.end());
  return out;
}

block_location block_store::locate(const std::string& ns, const std::string& key) const {
  const entry* e = find(ns, key);
  if (!e) return {};
  return {e->dram_offset.has_value(), !e->file.empty()};
}

std::string block_store::describe() const {
  return "block_store: dram " + std::to_string(arena_.used_bytes()) + "/" +
         std::to_string(arena_.capacity()) + " bytes on " +
         (arena_.huge_pages() ? "huge pages" : "plain pages") + ", ssd " +
         std::to_string(stats_.ssd_bytes) + "/" + std::to_string(options_.ssd_bytes) +
         " bytes in " + options_.ssd_dir.string() + ", " + std::to_string(stats_.ssd_blocks) +
         " blocks (" + std::to_string(stats_.dram_blocks) + " in dram)";
}

bool block_store::corrupt_dram_copy_for_test(const std::string& ns, const std::string& key) {
  entry* e = find(ns, key);
  if (!e || !e->dram_offset || e->size == 0) return false;
  *arena_.at(*e->dram_offset) ^= std::byte{0x5a};
  return true;
}

std::optional<std::filesystem::path> block_store::ssd_path_for_test(const std::string& ns,
                                                                    const std::string& key) const {
  const entry* e = find(ns, key);
  if (!e) return std::nullopt;
  return options_.ssd_dir / e->file;
}

} // namespace supernode::services::ems
