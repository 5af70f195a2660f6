#pragma once
// The MP server's storage engine (§4.4): blocks keyed by (namespace, key) in a DRAM arena,
// tiered onto an SSD folder. Every put is written through to the SSD tier (temp file, fsync,
// rename) before it returns, so a server killed with SIGKILL rebuilds its index from the folder
// and serves every block it acknowledged as persisted. DRAM is a cache over that tier (every block
// in DRAM also has its file): above a high watermark the least recently used blocks leave DRAM, and
// above the SSD capacity the least recently used blocks are deleted from the store. Every block
// carries a checksum over (ns, key, length, data) verified on every read, so a bad copy is dropped
// and never returned. Not thread-safe: one MP server actor owns a store.

#include "services/ems/dram_arena.hpp"
#include "services/protocol/ems_messages.hpp"
#include "services/protocol/error_codes.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace supernode::services::ems {

struct block_store_options {
  size_t dram_bytes = 64ull << 20;
  // Fraction of the arena a put or promotion may fill before LRU blocks leave DRAM.
  double dram_high_watermark = 0.9;
  std::filesystem::path ssd_dir;
  // On-disk bytes (headers included) above which LRU files are deleted.
  uint64_t ssd_bytes = 1ull << 30;
  bool huge_pages = true;
  // When set, the DRAM tier lives here instead of in a private mapping: the MP server passes its
  // shared region so that clients on the host can copy blocks straight out of it (UB reads).
  std::span<std::byte> dram_memory;
};

struct put_result {
  bool stored = false;
  bool persisted = false; // on the SSD tier, fsynced and renamed into place
  bool in_dram = false;   // false when the block cannot fit the arena at all
  protocol::error error;  // set when !stored
  explicit operator bool() const { return stored; }
};

struct put_item {
  std::string key;
  std::span<const std::byte> data;
};

struct block_location {
  bool in_dram = false;
  bool on_ssd = false;
  bool operator==(const block_location&) const = default;
};

struct block_store_stats {
  uint64_t dram_hits = 0;
  uint64_t ssd_hits = 0;
  uint64_t misses = 0;
  uint64_t corrupt_blocks = 0; // bad DRAM copies, bad SSD files, bad files found on restart
  uint64_t dram_blocks = 0;
  uint64_t dram_bytes = 0; // data bytes, not arena rounding
  uint64_t ssd_blocks = 0;
  uint64_t ssd_bytes = 0; // file bytes, headers included
  uint64_t evictions_dram_to_ssd = 0;
  uint64_t ssd_deletions = 0; // by the capacity threshold, not by remove()
  uint64_t rejected_puts = 0;
};

class block_store {
public:
  // Creates ssd_dir when missing, otherwise rebuilds the index from its files: each is
  // verified, and corrupt or half-written ones are counted and deleted. Throws
  // std::invalid_argument for bad options and std::runtime_error naming the folder when it
  // cannot be created or listed.
  explicit block_store(block_store_options options);
  ~block_store();
  block_store(const block_store&) = delete;
  block_store& operator=(const block_store&) = delete;

  // Replaces any previous value of (ns, key). Fails (stored = false, error naming ns, quota and
  // size) when ns would exceed its quota — evicting nothing — or when the block is larger than
  // the SSD tier or cannot be written; a failed put leaves any previous value intact.
  put_result put(const std::string& ns, const std::string& key, std::span<const std::byte> data);
  // The data, verified; promotes the block to most recently used and caches an SSD-only block
  // in DRAM. A bad DRAM copy falls back to the SSD copy; nullopt when no good copy is left.
  std::optional<std::vector<std::byte>> get(const std::string& ns, const std::string& key);
  // Index lookup only: no promotion, no verification.
  bool exists(const std::string& ns, const std::string& key) const;
  // True when the block was there; its DRAM copy and file are gone when this returns.
  bool remove(const std::string& ns, const std::string& key);
  // Where a block's verified bytes can be read in the DRAM tier, for a reader that maps the
  // arena: promotes the block like get() and brings an SSD-only block into DRAM. nullopt for a
  // miss; a ref with no offset when the block is good but cannot be cached in DRAM (`data` then
  // holds it). The bytes stay there only until the store's next put or eviction, so a reader
  // copies them out and checks the checksum after the copy.
  struct dram_ref {
    std::optional<size_t> offset;
    uint64_t size = 0;
    uint64_t checksum = 0;
    std::vector<std::byte> data;
  };
  std::optional<dram_ref> get_ref(const std::string& ns, const std::string& key);
  std::vector<put_result> put_many(const std::string& ns, std::span<const put_item> items);
  std::vector<std::optional<std::vector<std::byte>>> get_many(const std::string& ns,
                                                              std::span<const std::string> keys);

  // Data bytes ns may hold across both tiers; existing blocks are kept when lowered.
  void set_quota(const std::string& ns, uint64_t bytes);
  void clear_quota(const std::string& ns);
  std::optional<uint64_t> quota(const std::string& ns) const;
  uint64_t namespace_bytes(const std::string& ns) const;
  // Every namespace holding blocks, by name: its data bytes and block count.
  std::vector<protocol::ems_namespace_usage> usage() const;
  // ns's keys, sorted; never another namespace's.
  std::vector<std::string> keys(const std::string& ns) const;

  block_location locate(const std::string& ns, const std::string& key) const;
  const block_store_stats& stats() const { return stats_; }
  const dram_arena& arena() const { return arena_; }
  std::string describe() const;

  // Test-only hooks: flip a byte of the DRAM copy (false when not in DRAM or empty), and where the
  // SSD copy lives, so a test can damage it on disk.
  bool corrupt_dram_copy_for_test(const std::string& ns, const std::string& key);
  std::optional<std::filesystem::path> ssd_path_for_test(const std::string& ns,
                                                         const std::string& key) const;

private:
  struct entry;
  using lru_list = std::list<entry*>; // front = least recently used
  // Every indexed block has its file (the SSD tier is inclusive of DRAM), so the set a restart
  // rebuilds is exactly the set the index held.
  struct entry {
    std::string ns;
    std::string key;
    uint64_t size = 0;
    uint64_t checksum = 0;
    uint64_t seq = 0; // put order, persisted, so a restart keeps the LRU order of puts
    std::optional<size_t> dram_offset;
    std::string file; // name inside ssd_dir
    uint64_t file_bytes = 0;
    lru_list::iterator dram_pos;
    lru_list::iterator ssd_pos;
  };
  struct ns_state {
    std::unordered_map<std::string, entry> blocks;
    uint64_t bytes = 0;
    std::optional<uint64_t> quota;
  };

  entry* find(const std::string& ns, const std::string& key);
  const entry* find(const std::string& ns, const std::string& key) const;
  protocol::error reject(protocol::error error);
  void touch(entry& e);
  std::string file_name_for(const std::string& ns, const std::string& key) const;
  std::string write_file(const std::string& name, const entry& e, std::span<const std::byte> data);
  void attach_file(entry& e, const std::string& name, uint64_t file_bytes);
  void detach_file(entry& e);
  bool cache_in_dram(entry& e, std::span<const std::byte> data);
  void evict_from_dram(entry& e);
  void drop_dram_copy(entry& e);
  void enforce_ssd_capacity(const entry* keep);
  void erase(entry& e);
  std::optional<std::vector<std::byte>> read_file(const entry& e, bool& corrupt) const;
  void rebuild_from_dir();

  block_store_options options_;
  dram_arena arena_;
  int dir_fd_ = -1; // held open to fsync renames into the folder
  std::unordered_map<std::string, ns_state> namespaces_;
  std::unordered_map<std::string, const entry*> files_; // file name -> owner, for collisions
  lru_list dram_lru_;
  lru_list ssd_lru_;
  uint64_t next_seq_ = 1;
  block_store_stats stats_;
};

} // namespace supernode::services::ems
