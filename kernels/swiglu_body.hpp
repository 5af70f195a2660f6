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

inline swiglu_vector silu_mul_lanes(swiglu_vector g, swiglu_vector up) {
  const swiglu_vector e = vector_math::exp_nonpositive(g < 0.0f ? g : -g);
  // One division for both signs (a divide costs as much as the whole exp on a ZMM register).
  const swiglu_vector numerator = g < 0.0f ? g * e : g;
  return numerator / (1.0f + e) * up;
}
} // namespace

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + swiglu_lanes <= n; i += swiglu_lanes) {
    swiglu_vector g, u;
    __builtin_memcpy(&g, gate + i, sizeof g);
    __builtin_memcpy(&u, up + i, sizeof u);
    const swiglu_vector y = silu_mul_lanes(g, u);
    __builtin_memcpy(out + i, &y, sizeof y);
  }
  if (i == n) return;
  const auto rest = static_cast<unsigned long>(n - i) * sizeof(float);
  swiglu_vector g{}, u{};
  __builtin_memcpy(&g, gate + i, rest);
  __builtin_memcpy(&u, up + i, rest);
  const swiglu_vector y = silu_mul_lanes(g, u);
  __builtin_memcpy(out + i, &y, rest);
}
