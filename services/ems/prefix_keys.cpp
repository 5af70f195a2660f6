#include "services/ems/prefix_keys.hpp"

#include "services/ems/hash_ring.hpp"

#include <cstdio>
#include <stdexcept>

namespace supernode::services::ems {

std::vector<uint64_t> prefix_block_keys(std::string_view model_and_version,
                                        std::span<const int32_t> tokens, int64_t block_tokens) {
  if (block_tokens < 1)
    throw std::invalid_argument("context cache: block size must be >= 1 token, got " +
                                std::to_string(block_tokens));
  if (model_and_version.empty())
    throw std::invalid_argument("context cache: keys need a model id and version");
  const uint64_t model = stable_hash(model_and_version);
  std::vector<uint64_t> keys;
  uint64_t parent = model; // the first block chains from the model alone
  std::string bytes;
  const size_t block = static_cast<size_t>(block_tokens);
  for (size_t start = 0; start + block <= tokens.size(); start += block) {
    // Little-endian words, so the key is the same on every host.
    bytes.clear();
    auto put = [&](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    };
    put(parent, 8);
    put(model, 8);
    for (size_t i = start; i < start + block; ++i) put(static_cast<uint32_t>(tokens[i]), 4);
    parent = stable_hash(bytes);
    keys.push_back(parent);
  }
  return keys;
}

std::string decode_kv_model_key(std::string_view model_and_version, int64_t prompt_tokens) {
  return std::string(model_and_version) + "#decode-after-" + std::to_string(prompt_tokens);
}

size_t longest_cached_prefix(std::span<const uint64_t> keys,
                             const std::function<bool(uint64_t)>& cached) {
  size_t n = 0;
  while (n < keys.size() && cached(keys[n])) ++n;
  return n;
}

std::string context_block_name(uint64_t key) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "ctx/%016llx", static_cast<unsigned long long>(key));
  return buf;
}

} // namespace supernode::services::ems
