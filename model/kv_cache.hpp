#pragma once
// The paged latent KV cache of MLA. A block holds `block_size` consecutive tokens of one
// sequence for every layer; per token and layer it stores the normed latent c_kv (kv_lora
// floats) and the rotated shared key k_pe (rope floats). This block is the unit prefill ships
// to decode and EMS stores, so its layout is a type of its own.

#include "kernels/attention.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <vector>

namespace supernode::model {

struct kv_block_layout {
  int64_t layers = 0;
  int64_t block_size = 0;
  int64_t kv_lora = 0;
  int64_t rope = 0;

  int64_t token_floats() const { return kv_lora + rope; }
  int64_t layer_block_floats() const { return block_size * token_floats(); }
  // One block across all layers, as shipped or stored: [layer][slot][kv_lora + rope] floats.
  int64_t block_floats() const { return layers * layer_block_floats(); }
  size_t block_bytes() const { return static_cast<size_t>(block_floats()) * sizeof(float); }
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size - 1) / block_size; }
  bool operator==(const kv_block_layout&) const = default;
};

struct kv_cache_full : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Fixed pool of blocks; storage is layer-major so one layer's blocks sit together.
class kv_block_pool {
public:
  kv_block_pool(const kv_block_layout& layout, int64_t num_blocks);

  const kv_block_layout& layout() const { return layout_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  std::optional<int32_t> allocate();
  void release(int32_t block);

  float* block_data(int64_t layer, int32_t block) {
    return storage_.data() + (layer * num_blocks_ + block) * layout_.layer_block_floats();
  }
  const float* block_data(int64_t layer, int32_t block) const {
    return storage_.data() + (layer * num_blocks_ + block) * layout_.layer_block_floats();
  }

  // Whole-block copies across layers in the shipping layout (kv_block_layout::block_floats).
  void export_block(int32_t block, std::span<float> out) const;
  void import_block(int32_t block, std::span<const float> in);
  // The same as bytes at any alignment (a message being built, a received frame).
  void export_block_bytes(int32_t block, std::span<std::byte> out) const;
  void import_block_bytes(int32_t block, std::span<const std::byte> in);

private:
  kv_block_layout layout_;
  int64_t num_blocks_;
  std::vector<float> storage_;
  std::vector<int32_t> free_; // a stack: the most recently freed block is reused first
  std::vector<bool> in_use_;
};

// One sequence's blocks, in token order.
class kv_block_table {
public:
  int64_t tokens() const { return tokens_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }

  // Grows the table to hold `tokens` tokens; throws kv_cache_full (allocating nothing) when
  // the pool cannot supply the blocks.
  void reserve(kv_block_pool& pool, int64_t tokens);
  void set_tokens(int64_t tokens) { tokens_ = tokens; }
  // Returns every block to the pool.
  void release(kv_block_pool& pool);

  float* token_slot(kv_block_pool& pool, int64_t layer, int64_t pos) const;
  // A view for the attention kernels of one layer; `pointers` is the caller's scratch.
  kernels::latent_kv_view view(const kv_block_pool& pool, int64_t layer, int64_t length,
                               std::vector<const float*>& pointers) const;

private:
  std::vector<int32_t> blocks_;
  int64_t tokens_ = 0;
};

// Returns the tables' blocks to the pool when it goes out of scope, on every exit path.
class kv_tables_guard {
public:
  kv_tables_guard(kv_block_pool& pool, std::span<kv_block_table> tables)
      : pool_(pool), tables_(tables) {}
  ~kv_tables_guard() {
    for (auto& t : tables_) t.release(pool_);
  }
  kv_tables_guard(const kv_tables_guard&) = delete;
  kv_tables_guard& operator=(const kv_tables_guard&) = delete;

private:
  kv_block_pool& pool_;
  std::span<kv_block_table> tables_;
};

} // namespace supernode::model
