#pragma once
// What a user of the memory pool sees (§4.4.1's MP SDK): batch put/get/exists/remove/list on
// (namespace, key), and the controller's model registry. The networked client (ems_client)
// routes each key by the controller's ring and reads over UB or VPC; tests may put an
// in-memory pool behind the same interface. Calls block until every server answered or the
// client's timeout passed; they may be made from any thread but a plane's own.

#include "services/protocol/error_codes.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace supernode::services::ems {

struct pool_put {
  std::string key;
  std::span<const std::byte> data;
};

// Per key: stored, or why not (over quota, server unreachable, ...). Never thrown: a failed put
// only costs a later miss.
struct pool_put_outcome {
  bool stored = false;
  protocol::error error;
};

// Per key: the bytes, or nullopt for a miss. A miss covers every way of not having good bytes:
// absent, evicted, corrupt, server down or the read timed out; `errors` counts the last kinds.
struct pool_get_outcome {
  std::vector<std::optional<std::vector<std::byte>>> blocks;
  size_t errors = 0;
  std::string first_error;
};

// The controller's answer to "who loads model M?": the registered manifest when the model is
// in the pool, or the caller's turn to fetch it from object storage and register it. Callers
// that ask while another instance fetches wait for that fetch instead (one fetch for N).
struct model_claim {
  enum class state { ready, fetch } what = state::fetch;
  std::vector<std::byte> manifest; // when ready: what register_model was given
};

class pool_client {
public:
  virtual ~pool_client() = default;

  virtual std::vector<pool_put_outcome> put(const std::string& ns,
                                            std::span<const pool_put> items) = 0;
  virtual pool_get_outcome get(const std::string& ns, std::span<const std::string> keys) = 0;
  // Index lookups on the owning servers; unreachable servers answer false.
  virtual std::vector<bool> exists(const std::string& ns, std::span<const std::string> keys) = 0;
  // Number of keys that were there.
  virtual size_t remove(const std::string& ns, std::span<const std::string> keys) = 0;
  // Every key of ns on every server, sorted; never another namespace's.
  virtual std::vector<std::string> list(const std::string& ns) = 0;

  // Model registry (controller). `model_key` names a model and version ("demo@3f2a...").
  // Throws std::runtime_error naming the model when the controller cannot be reached.
  virtual model_claim claim_model(const std::string& model_key) = 0;
  // Records the manifest and the blocks that make the model (namespace `ns`), so the controller
  // can evict the model as a whole; wakes the instances waiting in claim_model. With `failed`
  // set, the claim passes to the next waiter instead.
  virtual void register_model(const std::string& model_key, const std::string& ns,
                              std::span<const std::byte> manifest,
                              std::span<const std::string> block_keys, uint64_t bytes,
                              const std::string& failed = {}) = 0;
};

} // namespace supernode::services::ems
