#include "kernels/rope.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace supernode::kernels {

namespace {
double get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}
double correction_dim(double rotations, int64_t dim, double base, int64_t max_pos) {
  return dim * std::log(max_pos / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}
} // namespace

rope_table::rope_table(const rope_params& p) : dim_(p.dim) {
  if (p.dim <= 0 || p.dim % 2 != 0 || p.dim > 512)
    throw std::invalid_argument("rope: dim must be even and in [2, 512]");
  const int64_t half = p.dim / 2;
  inv_freq_.resize(half);
  for (int64_t i = 0; i < half; ++i)
    inv_freq_[i] = 1.0 / std::pow(p.theta, static_cast<double>(2 * i) / p.dim);
  if (p.yarn) {
    double low = std::floor(correction_dim(p.beta_fast, p.dim, p.theta, p.original_max_position));
    double high = std::ceil(correction_dim(p.beta_slow, p.dim, p.theta, p.original_max_position));
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(p.dim - 1));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      double extrapolate = 1.0 - ramp; // high-frequency dims keep their frequency
      inv_freq_[i] = inv_freq_[i] / p.factor * (1.0 - extrapolate) + inv_freq_[i] * extrapolate;
    }
    cos_scale_ = get_mscale(p.factor, p.mscale) / get_mscale(p.factor, p.mscale_all_dim);
  }
  // Each prefill token asks for its rotation twice per layer (key and query): from a table, a
  // 2,048-token prompt's 32,000 sincos calls per forward become loads.
  table_.resize(static_cast<size_t>(tabled_positions * 2 * half));
  for (int64_t pos = 0; pos < tabled_positions; ++pos)
    rotation(pos, table_.data() + pos * 2 * half, table_.data() + pos * 2 * half + half);
}

void rope_table::rotation(int64_t pos, float* c, float* s) const {
  for (int64_t i = 0; i < dim_ / 2; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq_[i];
    c[i] = static_cast<float>(std::cos(angle) * cos_scale_);
    s[i] = static_cast<float>(std::sin(angle) * cos_scale_);
  }
}

void rope_table::apply(float* x, int64_t count, int64_t stride, int64_t pos) const {
  const int64_t half = dim_ / 2;
  float computed[512];
  const float* c = computed;
  if (pos >= 0 && pos < tabled_positions)
    c = table_.data() + pos * 2 * half;
  else
    rotation(pos, computed, computed + half);
  const float* s = c + half;
  for (int64_t v = 0; v < count; ++v) {
    float* xv = x + v * stride;
    for (int64_t i = 0; i < half; ++i) {
      const float a = xv[2 * i], b = xv[2 * i + 1];
      xv[2 * i] = a * c[i] - b * s[i];
      xv[2 * i + 1] = a * s[i] + b * c[i];
    }
  }
}

} // namespace supernode::kernels
