#pragma once
// Every tensor of a DeepSeek-V3 checkpoint, with its Hugging Face name and shape, derived from
// the config. The checkpoint maker writes exactly this list and the loader reads from it, so the
// two can never disagree about a name.

#include "model/config.hpp"
#include "model/safetensors.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace supernode::model {

enum class tensor_role : uint8_t {
  embedding,   // [vocab, hidden]
  head,        // lm_head / shared_head.head
  linear,      // a matmul weight [out, in]; FP8 with weight_scale_inv in DeepSeek's release
  output_proj, // a linear writing into the residual stream (o_proj, down_proj): smaller init
  norm,        // RMSNorm weight
  gate,        // router weight [experts, hidden]
  gate_bias,   // e_score_correction_bias [experts], F32
  mtp_proj,    // eh_proj [hidden, 2 hidden]
};

struct tensor_spec {
  std::string name;
  std::vector<int64_t> shape;
  tensor_role role;
  // The config.json fields each dimension comes from ("hidden_size",
  // "num_attention_heads * v_head_dim"), so a mismatch names the field to fix.
  std::vector<std::string> shape_fields;
  int64_t fan_in() const { return shape.size() > 1 ? shape[1] : shape[0]; }
};

std::string layer_prefix(int64_t layer); // "model.layers.N."

// The tensors in checkpoint order, one at a time: a checker can stop at the first bad one
// without building the list of a config that asks for millions.
void for_each_tensor_spec(const model_config& c, const std::function<void(const tensor_spec&)>& f);
std::vector<tensor_spec> checkpoint_layout(const model_config& c);

// The `<name>_scale_inv` shape of an FP8 matrix: one scale per weight_block_size block.
std::vector<int64_t> fp8_scale_shape(const model_config& c, std::span<const int64_t> shape);

// Whether DeepSeek's FP8 release stores this tensor as F8_E4M3 with a weight_scale_inv (the
// linears, when the config asks for FP8); the rest is BF16 but e_score_correction_bias, F32.
bool stored_as_fp8(const tensor_spec& s, const model_config& c);
// The safetensors entries of `specs` in order, each FP8 matrix followed by its scale_inv.
std::vector<safetensors_writer::entry> checkpoint_entries(const std::vector<tensor_spec>& specs,
                                                          const model_config& c);

} // namespace supernode::model
