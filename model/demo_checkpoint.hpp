#pragma once
// The demo model: a small DeepSeek-V3 trained on this machine (training/demo-model/), committed
// as a compact safetensors file (trained vocabulary rows only, FP8 linears) and expanded here into
// a full checkpoint in DeepSeek's layout with the real 129,280-row vocabulary.

#include "model/config.hpp"

#include <filesystem>
#include <string>

namespace supernode::model {

// $SUPERNODE_DEMO_WEIGHTS, else training/demo-model/demo-weights.safetensors under
// $SUPERNODE_HOME (the repository root ./supernode sets), else under the current folder;
// throws naming the places looked at and the command that retrains it.
std::filesystem::path demo_weights_path();

// The config stored in the compact file (vocab_size is the full vocabulary's).
model_config demo_model_config(const std::filesystem::path& compact);

// A digest of the compact file's bytes, recorded in the expanded checkpoint so a retrained
// model is expanded again.
std::string demo_weights_digest(const std::filesystem::path& compact);

// Writes the full model.safetensors for `c` (demo_model_config with the caller's quantization):
// linears as the compact file stores them (F8_E4M3 + weight_scale_inv) or, without FP8, as BF16;
// the trained embedding and head rows at their token ids and every other row the compact file's
// untrained row; the MTP module's embedding and head as copies of the main ones.
void write_demo_safetensors(const std::filesystem::path& compact, const model_config& c,
                            const std::filesystem::path& out, bool progress);

} // namespace supernode::model
