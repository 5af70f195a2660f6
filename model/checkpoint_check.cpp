#include "model/checkpoint_check.hpp"

#include "model/checkpoint_layout.hpp"
#include "model/safetensors.hpp"

#include <stdexcept>

namespace supernode::model {

namespace {

[[noreturn]] void fail(const tensor_view& t, const std::string& what) {
  throw std::runtime_error(t.file.string() + ": tensor '" + t.name + "' " + what);
}

bool is_float_type(dtype t) {
  return t == dtype::f32 || t == dtype::bf16 || t == dtype::f16;
}

// The first dimension that differs names the field to fix; a different rank names them all.
void check_shape(const tensor_view& t, const tensor_spec& spec) {
  if (t.shape == spec.shape) return;
  std::string fields;
  if (t.shape.size() != spec.shape.size()) {
    for (auto& f : spec.shape_fields) fields += (fields.empty() ? "" : ", ") + f;
    fail(t, "has shape " + shape_string(t.shape) + " but config.json implies " +
                shape_string(spec.shape) + " (" + fields + ")");
  }
  size_t d = 0;
  while (t.shape[d] == spec.shape[d]) ++d;
  fail(t, "has shape " + shape_string(t.shape) + " but config.json's " + spec.shape_fields[d] +
              " = " + std::to_string(spec.shape[d]) + " implies " + shape_string(spec.shape));
}

// What tensor_view::to_float converts; FP8 also needs its scales (fp8_scale_of).
void check_dtype(const tensor_view& t) {
  if (is_float_type(t.type) || t.type == dtype::f8_e4m3 || t.type == dtype::i8) return;
  fail(t, std::string("has dtype ") + dtype_name(t.type) + ", not a weight type the loader reads");
}

} // namespace

const tensor_view& fp8_scale_of(const checkpoint_reader& ckpt, const model_config& config,
                                const tensor_view& weight) {
  // DeepSeek's FP8 release: weight [rows][cols] E4M3 with a [ceil(rows/br)][ceil(cols/bc)]
  // tensor `<name>_scale_inv`; the real value is e4m3 * scale_inv of its block.
  if (weight.shape.size() != 2)
    fail(weight, "is FP8 but not a matrix: shape " + shape_string(weight.shape));
  const std::string scale_name = weight.name + "_scale_inv";
  if (!ckpt.contains(scale_name)) fail(weight, "is FP8 but has no '" + scale_name + "'");
  const auto& scale = ckpt.get(scale_name);
  if (!is_float_type(scale.type))
    fail(scale, std::string("has dtype ") + dtype_name(scale.type) + "; FP8 scales are floats");
  const auto expected = fp8_scale_shape(config, weight.shape);
  if (scale.shape != expected)
    fail(scale, "has shape " + shape_string(scale.shape) +
                    " but config.json's quantization_config.weight_block_size = [" +
                    std::to_string(config.quantization.block_rows) + ", " +
                    std::to_string(config.quantization.block_cols) + "] implies " +
                    shape_string(expected) + " for '" + weight.name + "' " +
                    shape_string(weight.shape));
  return scale;
}

void check_checkpoint(const checkpoint_reader& ckpt, const model_config& config) {
  for_each_tensor_spec(config, [&](const tensor_spec& spec) {
    // The loader computes routing without a correction bias when the checkpoint has none.
    if (spec.role == tensor_role::gate_bias && !ckpt.contains(spec.name)) return;
    const auto& t = ckpt.get(spec.name); // throws naming a missing tensor
    check_shape(t, spec);
    check_dtype(t);
    if (t.type == dtype::f8_e4m3) fp8_scale_of(ckpt, config, t);
  });
}

} // namespace supernode::model
