#pragma once
// Makes DeepSeek-V3-architecture checkpoints in the released Hugging Face format (config.json,
// model.safetensors with FP8 E4M3 block-scaled linears or BF16, the tokenizer files), with
// random weights scaled so activations stay in range. Deterministic for a seed: every tensor
// chunk draws from its own stream keyed by (seed, tensor name, chunk), whatever the threads.

#include "model/config.hpp"

#include <cstdint>
#include <filesystem>
#include <string>

namespace supernode::model {

struct make_options {
  std::string preset =
      "tiny"; // tiny | small (seeded noise) | demo (trained, see demo_checkpoint.hpp)
  uint64_t seed = 1;
  std::filesystem::path out;
  bool fp8 = true; // linears as F8_E4M3 + weight_scale_inv (DeepSeek's release); else BF16
  std::filesystem::path tokenizer_dir; // folder with tokenizer.json and tokenizer_config.json
  bool progress = true;
};

// Throws std::invalid_argument for an unknown preset.
model_config preset_config(const std::string& preset);

void make_checkpoint(const make_options& options);

// `dir` if it already holds a checkpoint, else makes one there from `preset` and `seed`
// (the demo and benchmark models are made on first use).
std::filesystem::path ensure_checkpoint(const std::filesystem::path& dir, const std::string& preset,
                                        uint64_t seed);

// The tokenizer folder from $SUPERNODE_TOKENIZER_DIR, else $SUPERNODE_HOME/.deps/npm/...;
// throws with instructions when neither holds tokenizer.json.
std::filesystem::path default_tokenizer_dir();

} // namespace supernode::model
