// Absorbed MLA decode in portable C++ (registers of four floats: SSE2 on x86-64); the reference
// the SIMD units match bit for bit.
#include "kernels/attention_decode.hpp"
#include "kernels/elementwise.hpp"

#include <array>
#include <utility>
#include <vector>

namespace supernode::kernels::attention_decode::portable {
#define SUPERNODE_DECODE_WIDTH 4
#include "kernels/attention_decode_body.hpp"
} // namespace supernode::kernels::attention_decode::portable
