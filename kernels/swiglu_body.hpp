// The body of <isa>::silu_mul, included once per unit inside its namespace (as
// attention_tiles_body.hpp is): the unit defines SUPERNODE_SWIGLU_WIDTH, the floats of one of its
// registers. Every lane is its own chain of IEEE operations (units built with -ffp-contract=off)
// and the tail is padded into a whole register, so every width gives the same bits.
//
// silu(g) * up = g / (1 + exp(-g)) * up, with the exp taken of -|g| only, so it never
// overflows: for g < 0, g / (1 + 1/e) is written g * e / (1 + e).

namespace {
using swiglu_vector = float __attribute__((vector_size(SUPERNODE_SWIGLU_WIDTH * sizeof(float))));
constexpr int64_t swiglu_lanes = SUPERNODE_SWIGLU_WIDTH;
// Registers per step: their exps interleave (vector_exp.hpp). Eight on Zen 5's ZMM registers ran
// 1.5x as fast as one; four of them, 1.3x.
constexpr int swiglu_registers = 8;

template<int U>
inline void silu_mul_registers(const float* gate, const float* up, float* out) {
  swiglu_vector g[U], e[U];
  for (int k = 0; k < U; ++k) {
    __builtin_memcpy(&g[k], gate + k * swiglu_lanes, sizeof g[k]);
    e[k] = g[k] < 0.0f ? g[k] : -g[k];
  }
  vector_math::exp_nonpositive_n(e);
  for (int k = 0; k < U; ++k) {
    swiglu_vector u;
    __builtin_memcpy(&u, up + k * swiglu_lanes, sizeof u);
    // One division for both signs (a divide costs as much as the whole exp on a ZMM register).
    const swiglu_vector numerator = g[k] < 0.0f ? g[k] * e[k] : g[k];
    const swiglu_vector y = numerator / (1.0f + e[k]) * u;
    __builtin_memcpy(out + k * swiglu_lanes, &y, sizeof y);
  }
}
} // namespace

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + swiglu_registers * swiglu_lanes <= n; i += swiglu_registers * swiglu_lanes)
    silu_mul_registers<swiglu_registers>(gate + i, up + i, out + i);
  for (; i + swiglu_lanes <= n; i += swiglu_lanes) silu_mul_registers<1>(gate + i, up + i, out + i);
  if (i == n) return;
  // The tail, padded into a whole register.
  const auto rest = static_cast<unsigned long>(n - i) * sizeof(float);
  float g[swiglu_lanes] = {}, u[swiglu_lanes] = {}, y[swiglu_lanes];
  __builtin_memcpy(g, gate + i, rest);
  __builtin_memcpy(u, up + i, rest);
  silu_mul_registers<1>(g, u, y);
  __builtin_memcpy(out + i, y, rest);
}
