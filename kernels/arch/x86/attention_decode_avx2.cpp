// Absorbed MLA decode on YMM registers (AVX2): the same bits as the portable unit
// (attention_decode_body.hpp).
#include "kernels/attention_decode.hpp"
#include "kernels/elementwise.hpp"

#include <array>
#include <utility>
#include <vector>

namespace supernode::kernels::attention_decode::avx2 {
#define SUPERNODE_DECODE_WIDTH 8
#include "kernels/attention_decode_body.hpp"
} // namespace supernode::kernels::attention_decode::avx2
