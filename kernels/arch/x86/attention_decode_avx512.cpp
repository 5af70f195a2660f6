// Absorbed MLA decode on ZMM registers (AVX-512F): the same bits as the portable unit
// (attention_decode_body.hpp).
#include "kernels/attention_decode.hpp"
#include "kernels/elementwise.hpp"

#include <array>
#include <utility>
#include <vector>

namespace supernode::kernels::attention_decode::avx512 {
#define SUPERNODE_DECODE_WIDTH 16
#include "kernels/attention_decode_body.hpp"
} // namespace supernode::kernels::attention_decode::avx512
