// The prefill attention tile in portable C++ (the compiler's baseline vectors); the reference
// the SIMD units match bit for bit.
#include "kernels/attention_tiles.hpp"

namespace supernode::kernels::attention_tiles::portable {
#define SUPERNODE_ATTENTION_GROUP 4
#include "kernels/attention_tiles_body.hpp"
} // namespace supernode::kernels::attention_tiles::portable
