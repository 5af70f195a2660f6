#pragma once
// A matmul weight in the precision the engine runs: INT8 (per-channel weights, per-token
// activations; the paper's §4.5) or FP32 (for comparison and for the reference numbers).

#include "kernels/gemm_fp32.hpp"
#include "kernels/gemm_int8.hpp"

#include <cstdint>
#include <variant>

namespace supernode::model {

enum class precision : uint8_t { int8, fp32 };

const char* precision_name(precision p);
precision parse_precision(const std::string& s); // throws std::invalid_argument

class linear {
public:
  linear() = default;
  // W is [n][k], PyTorch Linear layout.
  static linear from_float(const float* w, int64_t n, int64_t k, precision p);

  int64_t n() const;
  int64_t k() const;
  size_t bytes() const;
  bool is_int8() const { return std::holds_alternative<kernels::int8_weight>(w_); }
  const kernels::int8_weight& int8() const { return std::get<kernels::int8_weight>(w_); }
  const kernels::fp32_weight& fp32() const { return std::get<kernels::fp32_weight>(w_); }

  // y[m][n] = x[m] · W^T. In INT8 mode x is quantized per row into `scratch`.
  void forward(const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy,
               kernels::quantized_rows& scratch) const;
  // Same, for activations already quantized per token (MoE dispatch quantizes once).
  void forward(const kernels::quantized_rows& xq, float* y, int64_t ldy) const;

private:
  std::variant<kernels::fp32_weight, kernels::int8_weight> w_;
};

} // namespace supernode::model
