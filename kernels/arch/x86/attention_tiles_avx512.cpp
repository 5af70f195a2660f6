// The prefill attention tile on AVX-512F (a block of 16 keys is one ZMM register; eight queries'
// accumulators beside the key vector).
#include "kernels/attention_tiles.hpp"

namespace supernode::kernels::attention_tiles::avx512 {
#define SUPERNODE_ATTENTION_WIDTH 16
#define SUPERNODE_ATTENTION_GROUP 8
#include "kernels/attention_tiles_body.hpp"
} // namespace supernode::kernels::attention_tiles::avx512
