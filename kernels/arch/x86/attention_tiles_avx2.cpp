// The prefill attention tile on AVX2 (a block of 16 keys is two YMM registers, so four queries'
// accumulators fit the sixteen registers).
#include "kernels/attention_tiles.hpp"

#include <immintrin.h>

namespace supernode::kernels::attention_tiles::avx2 {
#define SUPERNODE_ATTENTION_WIDTH 8
#define SUPERNODE_ATTENTION_GROUP 4
#define SUPERNODE_ATTENTION_SCORE_BLOCKS 1
#include "kernels/attention_tiles_body.hpp"
} // namespace supernode::kernels::attention_tiles::avx2
