#include "model/kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace supernode::model {

kv_block_pool::kv_block_pool(const kv_block_layout& layout, int64_t num_blocks)
    : layout_(layout), num_blocks_(num_blocks),
      storage_(static_cast<size_t>(layout.layers * num_blocks * layout.layer_block_floats())),
      in_use_(num_blocks, false) {
  if (layout.block_size <= 0 || num_blocks <= 0)
    throw std::invalid_argument("kv_block_pool: block size and block count must be positive");
  free_.reserve(num_blocks);
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

std::optional<int32_t> kv_block_pool::allocate() {
  if (free_.empty()) return std::nullopt;
  int32_t b = free_.back();
  free_.pop_back();
  in_use_[b] = true;
  return b;
}

void kv_block_pool::release(int32_t block) {
  if (block < 0 || block >= num_blocks_ || !in_use_[block])
    throw std::logic_error("kv_block_pool: releasing block " + std::to_string(block) +
                           " that is not allocated");
  in_use_[block] = false;
  free_.push_back(block);
}

void kv_block_pool::export_block(int32_t block, std::span<float> out) const {
  export_block_bytes(block, std::as_writable_bytes(out));
}

void kv_block_pool::import_block(int32_t block, std::span<const float> in) {
  import_block_bytes(block, std::as_bytes(in));
}

void kv_block_pool::export_block_bytes(int32_t block, std::span<std::byte> out) const {
  if (out.size() != layout_.block_bytes())
    throw std::invalid_argument("export_block: buffer size does not match the block layout");
  const size_t layer_bytes = static_cast<size_t>(layout_.layer_block_floats()) * sizeof(float);
  for (int64_t l = 0; l < layout_.layers; ++l)
    std::memcpy(out.data() + l * layer_bytes, block_data(l, block), layer_bytes);
}

void kv_block_pool::import_block_bytes(int32_t block, std::span<const std::byte> in) {
  if (in.size() != layout_.block_bytes())
    throw std::invalid_argument("import_block: buffer size does not match the block layout");
  const size_t layer_bytes = static_cast<size_t>(layout_.layer_block_floats()) * sizeof(float);
  for (int64_t l = 0; l < layout_.layers; ++l)
    std::memcpy(block_data(l, block), in.data() + l * layer_bytes, layer_bytes);
}

void kv_block_table::reserve(kv_block_pool& pool, int64_t tokens) {
  const int64_t need = pool.layout().blocks_for(tokens) - static_cast<int64_t>(blocks_.size());
  if (need <= 0) return;
  if (need > pool.free_blocks())
    throw kv_cache_full("KV cache full: " + std::to_string(need) + " blocks needed, " +
                        std::to_string(pool.free_blocks()) + " free");
  for (int64_t i = 0; i < need; ++i) blocks_.push_back(*pool.allocate());
}

void kv_block_table::release(kv_block_pool& pool) {
  for (auto b : blocks_) pool.release(b);
  blocks_.clear();
  tokens_ = 0;
}

float* kv_block_table::token_slot(kv_block_pool& pool, int64_t layer, int64_t pos) const {
  const auto& l = pool.layout();
  return pool.block_data(layer, blocks_.at(pos / l.block_size)) +
         (pos % l.block_size) * l.token_floats();
}

kernels::latent_kv_view kv_block_table::view(const kv_block_pool& pool, int64_t layer,
                                             int64_t length,
                                             std::vector<const float*>& pointers) const {
  const auto& l = pool.layout();
  pointers.resize(l.blocks_for(length));
  for (size_t i = 0; i < pointers.size(); ++i) pointers[i] = pool.block_data(layer, blocks_.at(i));
  return {pointers, l.block_size, l.kv_lora, l.rope, length};
}

} // namespace supernode::model
