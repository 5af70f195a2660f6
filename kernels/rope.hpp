#pragma once
// Rotary position embedding with DeepSeek-V3's YaRN frequency interpolation, applied to
// interleaved pairs (x[2i], x[2i+1]) as in the official inference code (HF's permute-then-
// rotate_half is the same rotation).

#include <cstdint>
#include <vector>

namespace supernode::kernels {

struct rope_params {
  int64_t dim = 0; // qk_rope_head_dim
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  int64_t original_max_position = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

class rope_table {
public:
  rope_table() = default;
  explicit rope_table(const rope_params& p);
  int64_t dim() const { return dim_; }
  const std::vector<double>& inv_freq() const { return inv_freq_; }
  // Rotates `count` vectors of dim() floats, each `stride` apart, all at position `pos`.
  void apply(float* x, int64_t count, int64_t stride, int64_t pos) const;

  // Positions whose cosines and sines are computed once, at construction (a megabyte for
  // DeepSeek-V3's 64 rope dims, half that for `small`'s 32); later positions compute theirs
  // per call.
  static constexpr int64_t tabled_positions = 4096;

private:
  // cos and sin of position `pos` (cos_scale_ applied) into c and s, dim_ / 2 each.
  void rotation(int64_t pos, float* c, float* s) const;

  int64_t dim_ = 0;
  double cos_scale_ = 1.0; // HF's _mscale: yarn_get_mscale(f, mscale) / yarn_get_mscale(f, all)
  std::vector<double> inv_freq_;
  std::vector<float> table_; // [pos][cos x dim/2, sin x dim/2] for pos < tabled_positions
};

} // namespace supernode::kernels
