#pragma once
// A pool in one process's memory behind the MP SDK interface, for running the context cache
// without MP servers (tests and benchmarks of what the cache saves, not of the pool): puts
// always store, gets return what was put, and it holds no models.

#include "services/ems/pool_client.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

namespace supernode::services::ems {

class context_cache_memory_pool : public pool_client {
public:
  std::vector<pool_put_outcome> put(const std::string& ns,
                                    std::span<const pool_put> items) override {
    std::lock_guard lock(mutex_);
    for (const auto& item : items)
      blocks_[{ns, item.key}].assign(item.data.begin(), item.data.end());
    return std::vector<pool_put_outcome>(items.size(), {true, {}});
  }
  pool_get_outcome get(const std::string& ns, std::span<const std::string> keys) override {
    std::lock_guard lock(mutex_);
    pool_get_outcome out;
    for (const auto& key : keys) {
      const auto it = blocks_.find({ns, key});
      out.blocks.push_back(it == blocks_.end() ? std::nullopt : std::optional(it->second));
    }
    return out;
  }
  std::vector<bool> exists(const std::string& ns, std::span<const std::string> keys) override {
    std::lock_guard lock(mutex_);
    std::vector<bool> out;
    for (const auto& key : keys) out.push_back(blocks_.count({ns, key}) != 0);
    return out;
  }
  size_t remove(const std::string& ns, std::span<const std::string> keys) override {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (const auto& key : keys) n += blocks_.erase({ns, key});
    return n;
  }
  std::vector<std::string> list(const std::string& ns) override {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [at, bytes] : blocks_)
      if (at.first == ns) out.push_back(at.second);
    return out;
  }
  model_claim claim_model(const std::string& model_key) override {
    throw std::runtime_error("an in-memory context pool holds no model " + model_key);
  }
  void register_model(const std::string&, const std::string&, std::span<const std::byte>,
                      std::span<const std::string>, uint64_t, const std::string&) override {}

private:
  std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::vector<std::byte>> blocks_;
};

} // namespace supernode::services::ems
