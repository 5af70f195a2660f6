#pragma once
// A checkpoint's safetensors headers checked against its config.json before anything is
// allocated: every tensor the config implies is there, with the shape the config's fields give
// it and a dtype the loader converts, and FP8 matrices carry their scale blocks. A config that
// disagrees with its tensors fails here in microseconds, naming the field, instead of deep in
// loading (or in a bad_alloc) after seconds.

#include "model/config.hpp"

namespace supernode::model {

class checkpoint_reader;
struct tensor_view;

// Throws std::runtime_error naming the file and the tensor; for a shape that disagrees, also
// the config field and both shapes.
void check_checkpoint(const checkpoint_reader& ckpt, const model_config& config);

// The `<name>_scale_inv` tensor of an FP8 matrix, checked: present, a float dtype, one scale
// per quantization_config.weight_block_size block.
const tensor_view& fp8_scale_of(const checkpoint_reader& ckpt, const model_config& config,
                                const tensor_view& weight);

} // namespace supernode::model
