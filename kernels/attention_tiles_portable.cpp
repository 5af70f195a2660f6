// The prefill attention tile in portable C++ (the compiler's baseline vectors); the reference
// the SIMD units match bit for bit. Registers of four floats (SSE2 on x86-64).
#include "kernels/attention_tiles.hpp"

namespace supernode::kernels::attention_tiles::portable {
#define SUPERNODE_ATTENTION_WIDTH 4
#define SUPERNODE_ATTENTION_GROUP 2
#define SUPERNODE_ATTENTION_SCORE_BLOCKS 1
#include "kernels/attention_tiles_body.hpp"
} // namespace supernode::kernels::attention_tiles::portable
