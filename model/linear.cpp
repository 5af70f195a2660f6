#include "model/linear.hpp"

#include <stdexcept>
#include <string>

namespace supernode::model {

const char* precision_name(precision p) {
  return p == precision::int8 ? "int8" : "fp32";
}

precision parse_precision(const std::string& s) {
  if (s == "int8") return precision::int8;
  if (s == "fp32") return precision::fp32;
  throw std::invalid_argument("precision must be int8 or fp32, got '" + s + "'");
}

linear linear::from_float(const float* w, int64_t n, int64_t k, precision p) {
  linear l;
  if (p == precision::int8)
    l.w_ = kernels::int8_weight::quantize(w, n, k);
  else
    l.w_ = kernels::fp32_weight::pack(w, n, k);
  return l;
}

int64_t linear::n() const {
  return std::visit([](auto& w) { return w.n(); }, w_);
}
int64_t linear::k() const {
  return std::visit([](auto& w) { return w.k(); }, w_);
}
size_t linear::bytes() const {
  return std::visit([](auto& w) { return w.bytes(); }, w_);
}

void linear::forward(const float* x, int64_t m, int64_t ldx, float* y, int64_t ldy,
                     kernels::quantized_rows& scratch) const {
  if (m == 0) return;
  if (is_int8()) {
    kernels::quantize_rows(x, m, k(), ldx, scratch);
    kernels::gemm_int8(scratch, int8(), y, ldy);
  } else {
    kernels::gemm_fp32(x, m, ldx, fp32(), y, ldy);
  }
}

void linear::forward(const kernels::quantized_rows& xq, float* y, int64_t ldy) const {
  if (xq.rows == 0) return;
  kernels::gemm_int8(xq, int8(), y, ldy);
}

} // namespace supernode::model
