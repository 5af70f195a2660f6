#pragma once
// The runtime form of a DeepSeek-V3 checkpoint: matmuls quantized (or packed) for our kernels,
// everything that stays FP32 (norms, router, embedding, kv_b for MLA absorption) as floats.

#include "kernels/gemm_fp32.hpp"
#include "model/config.hpp"
#include "model/linear.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

namespace supernode::model {

class checkpoint_reader;

struct mlp_weights {
  int64_t intermediate = 0;
  linear gate_up; // [2 * intermediate][hidden]: gate_proj rows then up_proj rows, one GEMM
  linear down;    // [hidden][intermediate]
};

struct attention_weights {
  linear q_a; // empty when q_lora_rank == 0
  std::vector<float> q_a_norm;
  linear q_b; // or the single q_proj
  linear kv_a;
  std::vector<float> kv_a_norm;
  // kv_b stays FP32: prefill expands the latent cache with it, decode absorbs it into q and
  // the output; using one representation keeps the two paths numerically alike.
  std::vector<float> kv_b;        // [heads * (nope + v)][kv_lora]
  kernels::fp32_weight kv_b_gemm; // the same, packed for the prefill expansion
  std::vector<float> w_uv_t;      // kv_b's W_uv rows transposed, [heads][kv_lora][v], for decode
  linear o;
};

struct moe_weights {
  kernels::fp32_weight router;        // [experts][hidden], FP32 as the paper keeps gating
  std::vector<float> correction_bias; // empty when the checkpoint has none
  std::vector<mlp_weights> experts;
  bool has_shared = false;
  mlp_weights shared;
};

struct layer_weights {
  std::vector<float> input_norm;
  attention_weights attn;
  std::vector<float> post_attention_norm;
  bool is_moe = false;
  mlp_weights dense;
  moe_weights moe;
};

struct mtp_weights {
  std::vector<float> enorm, hnorm;
  linear eh_proj; // [hidden][2 hidden]: input is [enorm(embed(next token)), hnorm(hidden)]
  layer_weights block;
  std::vector<float> head_norm;
  // Embedding and head are shared with the main model when the checkpoint's copies are
  // byte-identical (they are in DeepSeek's release); otherwise the MTP keeps its own.
  std::shared_ptr<const std::vector<float>> embedding;
  std::shared_ptr<const linear> head;
};

struct load_options {
  precision prec = precision::int8;
  bool load_mtp = true;
  bool progress = false;
};

struct model_weights {
  model_config config;
  precision prec = precision::int8;
  std::shared_ptr<const std::vector<float>> embedding; // [vocab][hidden]
  std::vector<layer_weights> layers;
  std::vector<float> final_norm;
  std::shared_ptr<const linear> lm_head;
  std::vector<mtp_weights> mtp;
  size_t matmul_bytes = 0; // weight bytes the matmuls stream per full forward

  // Reads config.json and the safetensors of `dir`. Errors name the file and the tensor.
  static std::shared_ptr<const model_weights> load(const std::filesystem::path& dir,
                                                   const load_options& options = {});
};

// A tensor as FP32, dequantizing FP8 E4M3 with its weight_scale_inv blocks; checks the shape.
std::vector<float> read_tensor_float(const checkpoint_reader& ckpt, const model_config& config,
                                     const std::string& name, std::vector<int64_t> shape);

} // namespace supernode::model
