// The prefill attention tile with its scores from vdpbf16ps (AVX-512 BF16: pairs of bf16
// products summed into FP32), the softmax and values in FP32 as on the other paths.
#include "kernels/attention_tiles.hpp"

#include <immintrin.h>

namespace supernode::kernels::attention_tiles::avx512_bf16 {
#define SUPERNODE_ATTENTION_WIDTH 16
#define SUPERNODE_ATTENTION_GROUP 8
#define SUPERNODE_ATTENTION_SCORE_BLOCKS 2
#define SUPERNODE_ATTENTION_BF16 1
#include "kernels/attention_tiles_body.hpp"
} // namespace supernode::kernels::attention_tiles::avx512_bf16
