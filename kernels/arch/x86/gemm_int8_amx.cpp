// AMX INT8 GEMM blocks (compiled with -mamx-tile -mamx-int8 and the AVX-512 flags): TDPBSSD
// multiplies s8 by s8 into exact int32 sums, so neither the sign trick nor a bias is needed, and
// the results are bit-identical to every other path (see gemm_int8_amx_driver.hpp for the tiles).
// Rows short of a 16-row tile go to the AVX-512 VNNI block, which gives the same bits.

#include "kernels/arch/x86/avx512_kernels.hpp"
#include "kernels/arch/x86/gemm_int8_amx_driver.hpp"

#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <vector>

namespace supernode::kernels::amx {

namespace {
// GCC's tile intrinsics paste their tile arguments into the asm text, so each tile number is
// spelled out: one specialization per tile, and per (accumulator, x, weight) triple the driver
// uses.
struct amx_tiles {
  template<int T>
  static void zero();
  template<int T>
  static void load(const void* p, int64_t stride);
  template<int T>
  static void store(void* p, int64_t stride);
  template<int C, int A, int B>
  static void dpbssd();
};

// Accumulators 0-3 are zeroed and stored, x tiles 4-5 and weight tiles 6-7 loaded.
#define SUPERNODE_AMX_ACCUMULATOR(T)                                                               \
  template<>                                                                                       \
  void amx_tiles::zero<T>() {                                                                      \
    _tile_zero(T);                                                                                 \
  }                                                                                                \
  template<>                                                                                       \
  void amx_tiles::store<T>(void* p, int64_t stride) {                                              \
    _tile_stored(T, p, stride);                                                                    \
  }
#define SUPERNODE_AMX_SOURCE(T)                                                                    \
  template<>                                                                                       \
  void amx_tiles::load<T>(const void* p, int64_t stride) {                                         \
    _tile_loadd(T, p, stride);                                                                     \
  }
SUPERNODE_AMX_ACCUMULATOR(0)
SUPERNODE_AMX_ACCUMULATOR(1)
SUPERNODE_AMX_ACCUMULATOR(2)
SUPERNODE_AMX_ACCUMULATOR(3)
SUPERNODE_AMX_SOURCE(4)
SUPERNODE_AMX_SOURCE(5)
SUPERNODE_AMX_SOURCE(6)
SUPERNODE_AMX_SOURCE(7)
#undef SUPERNODE_AMX_ACCUMULATOR
#undef SUPERNODE_AMX_SOURCE

#define SUPERNODE_AMX_DPBSSD(C, A, B)                                                              \
  template<>                                                                                       \
  void amx_tiles::dpbssd<C, A, B>() {                                                              \
    _tile_dpbssd(C, A, B);                                                                         \
  }
// Accumulator R * 2 + C from x tile 4 + R and weight tile 6 + C.
SUPERNODE_AMX_DPBSSD(0, 4, 6)
SUPERNODE_AMX_DPBSSD(1, 4, 7)
SUPERNODE_AMX_DPBSSD(2, 5, 6)
SUPERNODE_AMX_DPBSSD(3, 5, 7)
#undef SUPERNODE_AMX_DPBSSD

// The LDTILECFG operand (Intel SDM vol. 2, "LDTILECFG", memory area layout): palette 1, all
// eight tiles 16 rows x 64 bytes.
struct alignas(64) tile_config {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved0[14] = {};
  uint16_t colsb[8] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t reserved1[16] = {};
  uint8_t rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
  uint8_t reserved2[8] = {};
};
static_assert(sizeof(tile_config) == 64);

// Rows short of a tile from this many on go through AMX as one zero-padded tile, fewer through
// the AVX-512 VNNI block (the same bits either way: every sum is exact). bench kernels: VNNI
// wins at 8 rows, the padded tile at 12.
constexpr int64_t pad_rows_from = 10;

// Loads the configuration on a thread's first call, and again only if something else on the
// thread (oneDNN's AMX kernels in the benchmark) has loaded its own or released the tiles since.
void ensure_configured() {
  static const tile_config wanted;
  tile_config current;
  _tile_storeconfig(&current);
  if (std::memcmp(&current, &wanted, sizeof current) != 0) _tile_loadconfig(&wanted);
}
} // namespace

void gemm_int8_block(const avx2::int8_operands& o, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  constexpr int64_t tile_rows = amx_driver::tile_rows;
  const int64_t tiled = (m1 - m0) / tile_rows * tile_rows, rest = m1 - m0 - tiled;
  if (tiled > 0) {
    ensure_configured();
    amx_driver::rows_block<amx_tiles>(o, m0, m0 + tiled, g0, g1);
  }
  if (rest == 0) return;
  if (rest < pad_rows_from) return avx512_vnni::gemm_int8_block(o, m0 + tiled, m1, g0, g1);
  // The rows short of a tile, copied into one tile whose other rows are zero.
  thread_local std::vector<int8_t> x_rows;
  x_rows.resize(static_cast<size_t>(tile_rows * o.k_padded));
  std::memset(x_rows.data() + rest * o.k_padded, 0,
              static_cast<size_t>((tile_rows - rest) * o.k_padded));
  alignas(64) float x_scales[tile_rows] = {};
  for (int64_t r = 0; r < rest; ++r) {
    std::memcpy(x_rows.data() + r * o.k_padded, o.x + (m0 + tiled + r) * o.ldx,
                static_cast<size_t>(o.k_padded));
    x_scales[r] = o.x_scale[m0 + tiled + r];
  }
  avx2::int8_operands padded = o;
  padded.x = x_rows.data();
  padded.ldx = o.k_padded;
  padded.x_scale = x_scales;
  padded.y = o.y + (m0 + tiled) * o.ldy;
  ensure_configured();
  amx_driver::rows_block<amx_tiles>(padded, 0, tile_rows, g0, g1, rest);
}

} // namespace supernode::kernels::amx
