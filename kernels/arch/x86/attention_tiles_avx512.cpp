// The prefill attention tile on AVX-512F (a block of 16 keys is one ZMM register; eight queries
// against two blocks: 16 accumulators, so two loads of keys and eight of queries feed 32
// operations).
#include "kernels/attention_tiles.hpp"

#include <immintrin.h>

namespace supernode::kernels::attention_tiles::avx512 {
#define SUPERNODE_ATTENTION_WIDTH 16
#define SUPERNODE_ATTENTION_GROUP 8
#define SUPERNODE_ATTENTION_SCORE_BLOCKS 2
#include "kernels/attention_tiles_body.hpp"
} // namespace supernode::kernels::attention_tiles::avx512
