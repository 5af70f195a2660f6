#include "model/tokenizer/bpe.hpp"

#include "model/tokenizer/byte_level.hpp"

#include <algorithm>
#include <mutex>

namespace supernode::model::detail {

// Merges the lowest-ranked adjacent pair first, leftmost on ties, exactly as the Rust library's
// Word::merge_all; a heap keeps long words (e.g. long whitespace runs) at O(n log n).
void bpe_model::merge(std::string_view word, std::vector<int32_t>& out) const {
  struct symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool removed;
  };
  struct candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
  };
  // std heap functions build a max-heap: "less" means lower priority.
  auto lower_priority = [](const candidate& a, const candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };

  thread_local std::vector<symbol> symbols;
  thread_local std::vector<candidate> heap;
  symbols.clear();
  heap.clear();

  // Initial symbols: one per byte; bytes without a token become unk (fused if asked) or vanish.
  bool last_was_unk = false;
  for (unsigned char b : word) {
    int32_t id = byte_ids[b];
    if (id < 0) {
      if (unk_id < 0) continue;
      if (fuse_unk && last_was_unk) continue;
      id = unk_id;
      last_was_unk = true;
    } else {
      last_was_unk = false;
    }
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, false});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto lookup = [&](int32_t left, int32_t right) -> const merge_info* {
    auto it = merges.find(pair_key(left, right));
    return it == merges.end() ? nullptr : &it->second;
  };
  auto push = [&](uint32_t pos, const merge_info& m) {
    heap.push_back({m.rank, pos, m.new_id});
    std::push_heap(heap.begin(), heap.end(), lower_priority);
  };

  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const merge_info* m = lookup(symbols[i].id, symbols[i + 1].id))
      push(static_cast<uint32_t>(i), *m);
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lower_priority);
    const candidate top = heap.back();
    heap.pop_back();
    symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    symbol& right = symbols[left.next];
    // A stale entry: one side has merged since it was queued.
    const merge_info* current = lookup(left.id, right.id);
    if (!current || current->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = static_cast<int32_t>(top.pos);
    if (left.prev >= 0) {
      if (const merge_info* m = lookup(symbols[left.prev].id, left.id))
        push(static_cast<uint32_t>(left.prev), *m);
    }
    if (left.next >= 0) {
      if (const merge_info* m = lookup(left.id, symbols[left.next].id)) push(top.pos, *m);
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

void bpe_model::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (auto it = vocab.find(byte_level().encode(word)); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() == 1 && byte_ids[static_cast<unsigned char>(word[0])] >= 0) {
    out.push_back(byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  const bool cacheable = word.size() <= cache_max_word;
  if (cacheable) {
    std::shared_lock lock(cache_mutex);
    if (auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge(word, out);
  if (cacheable) {
    std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
    std::unique_lock lock(cache_mutex);
    // Dropping everything when full is crude but keeps memory bounded without LRU bookkeeping;
    // the frequent words come back within a few calls.
    if (cache.size() >= cache_capacity) cache.clear();
    cache.emplace(std::string(word), std::move(ids));
  }
}

} // namespace supernode::model::detail
