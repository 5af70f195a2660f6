#pragma once
// Weights loaded once per process: roles hosted by the same process (the embedded server runs
// prefill and decode side by side) share one read-only copy.

#include "model/weights.hpp"

#include <filesystem>
#include <memory>

namespace supernode::services {

// `with_mtp`: the MTP module too ([decode] mtp drafts with it; prefill writes its KV).
std::shared_ptr<const model::model_weights>
shared_weights(const std::filesystem::path& dir, model::precision precision, bool with_mtp);

} // namespace supernode::services
