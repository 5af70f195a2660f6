#pragma once
// The BPE model: vocabulary, merge ranks, and the merging of one pre-tokenized word into ids,
// with a cache of words seen before.

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace supernode::model::detail {

struct string_hash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

struct merge_info {
  uint32_t rank;
  int32_t new_id;
};

inline uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct bpe_model {
  std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> vocab;
  std::array<int32_t, 256> byte_ids{}; // id of each byte's one-character token, -1 if absent
  std::unordered_map<uint64_t, merge_info> merges; // by pair_key of the two ids
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool ignore_merges = false;

  // Words seen before. HF keeps a similar bounded cache; it changes speed only.
  static constexpr size_t cache_capacity = 1 << 16;
  static constexpr size_t cache_max_word = 256;
  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, string_hash, std::equal_to<>> cache;

  // Appends the ids of word (raw bytes of one piece) to out. Safe to call from several threads.
  void encode(std::string_view word, std::vector<int32_t>& out) const;

private:
  void merge(std::string_view word, std::vector<int32_t>& out) const;
};

} // namespace supernode::model::detail
