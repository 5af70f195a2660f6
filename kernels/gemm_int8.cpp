#include "kernels/gemm_int8.hpp"

#include "kernels/gemm_int8_operands.hpp"
#include "kernels/gemm_plan.hpp"
#include "kernels/kernel_isa.hpp"

#include <algorithm>
#include <stdexcept>
#if defined(__x86_64__)
#include "kernels/arch/x86/avx2_kernels.hpp"
#include "kernels/arch/x86/avx512_kernels.hpp"
#include "kernels/arch/x86/avxvnni_kernels.hpp"
#endif

namespace supernode::kernels {

namespace {
constexpr int64_t pc = int8_weight::panel_cols, kg = int8_weight::k_group,
                  gpn = int8_weight::group_panels;

// Byte offset of W[row][col] in the packed layout (see gemm_int8.hpp).
int64_t packed_offset(const int8_weight& w, int64_t row, int64_t col) {
  const int64_t panel = row / pc, g = panel / gpn, p = panel % gpn;
  const int64_t gp = w.panels_in_group(g);
  return (w.group_data(g) - w.packed()) + (col / kg) * gp * pc * kg + p * pc * kg +
         (row % pc) * kg + col % kg;
}

// Scalar twin of the SIMD blocks: same layout, exact int32 sums, same epilogue.
void gemm_int8_block_portable(const quantized_rows& x, const int8_weight& w, float* y, int64_t ldy,
                              int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  const int64_t kq = w.k_padded() / kg;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t gp = w.panels_in_group(g);
    const int8_t* base = w.group_data(g);
    for (int64_t p = 0; p < gp; ++p) {
      const int64_t col0 = (g * gpn + p) * pc, ncols = std::min(pc, w.n() - col0);
      for (int64_t m = m0; m < m1; ++m) {
        const int8_t* xr = x.row(m);
        int32_t acc[pc] = {};
        for (int64_t q = 0; q < kq; ++q) {
          const int8_t* wp = base + (q * gp + p) * pc * kg;
          for (int64_t c = 0; c < pc; ++c)
            for (int64_t j = 0; j < kg; ++j)
              acc[c] += int32_t{xr[q * kg + j]} * int32_t{wp[c * kg + j]};
        }
        for (int64_t c = 0; c < ncols; ++c)
          y[m * ldy + col0 + c] = static_cast<float>(acc[c]) * x.scale[m] * w.scale(col0 + c);
      }
    }
  }
}

using block_fn = void (*)(const quantized_rows&, const int8_weight&, float*, int64_t, int64_t,
                          int64_t, int64_t, int64_t);

#if defined(__x86_64__)
static_assert(avx2::int8_panel_cols == pc && avx2::int8_k_group == kg &&
              avx2::int8_group_panels == gpn);

void gemm_int8_block_avx2(const quantized_rows& x, const int8_weight& w, float* y, int64_t ldy,
                          int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  avx2::gemm_int8_block(int8_operands_of(x, w, y, ldy), m0, m1, g0, g1);
}

void gemm_int8_block_avx_vnni(const quantized_rows& x, const int8_weight& w, float* y, int64_t ldy,
                              int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  avx_vnni::gemm_int8_block(int8_operands_of(x, w, y, ldy), m0, m1, g0, g1);
}

void gemm_int8_block_avx512_vnni(const quantized_rows& x, const int8_weight& w, float* y,
                                 int64_t ldy, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  avx512_vnni::gemm_int8_block(int8_operands_of(x, w, y, ldy), m0, m1, g0, g1);
}

void gemm_int8_block_amx(const quantized_rows& x, const int8_weight& w, float* y, int64_t ldy,
                         int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  amx::gemm_int8_block(int8_operands_of(x, w, y, ldy), m0, m1, g0, g1);
}
#endif

block_fn pick_block() {
#if defined(__x86_64__)
  switch (active_kernel_isa()) {
  case kernel_isa::amx:
    return gemm_int8_block_amx;
  case kernel_isa::avx512_vnni:
    return gemm_int8_block_avx512_vnni;
  case kernel_isa::avx_vnni:
    return gemm_int8_block_avx_vnni;
  case kernel_isa::avx2:
    return gemm_int8_block_avx2;
  case kernel_isa::portable:
    break;
  }
#endif
  return gemm_int8_block_portable;
}

void check_shapes(const quantized_rows& x, const int8_weight& w, int64_t ldy) {
  if (x.cols != w.k()) throw std::invalid_argument("gemm_int8: x.cols != w.k()");
  if (x.rows > 0 && (x.stride < w.k_padded() ||
                     static_cast<int64_t>(x.q.size()) < (x.rows - 1) * x.stride + w.k_padded() ||
                     static_cast<int64_t>(x.scale.size()) < x.rows))
    throw std::invalid_argument("gemm_int8: quantized rows are not padded to the K step");
  if (x.rows > 1 && ldy < w.n()) throw std::invalid_argument("gemm_int8: ldy < n");
}
} // namespace

int8_weight int8_weight::quantize(const float* w, int64_t n, int64_t k) {
  int8_weight r;
  r.n_ = n;
  r.k_ = k;
  r.k_padded_ = (k + kg - 1) / kg * kg;
  // The packed panels are a multiple of 64 bytes (an even panel count of 8 x 4 bytes per run),
  // so the int32 sums and float scales after them stay aligned.
  r.storage_.assign(static_cast<size_t>(r.scales_offset() + n * int64_t{sizeof(float)}), 0);
  int8_t* packed = r.storage_.data();
  auto* compensation = reinterpret_cast<int32_t*>(packed + r.packed_bytes());
  auto* scales = reinterpret_cast<float*>(packed + r.scales_offset());
  std::vector<int8_t> row(static_cast<size_t>(k));
  for (int64_t c = 0; c < n; ++c) {
    scales[c] = quantize_row(w + c * k, k, row.data());
    int32_t sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += row[i];
    compensation[c] = -128 * sum;
    const int64_t panel = c / pc, g = panel / gpn, p = panel % gpn, gp = r.panels_in_group(g);
    int8_t* dst = packed + g * gpn * pc * r.k_padded_ + p * pc * kg + (c % pc) * kg;
    for (int64_t q = 0; q * kg < k; ++q)
      for (int64_t j = 0; j < kg && q * kg + j < k; ++j)
        dst[q * gp * pc * kg + j] = row[q * kg + j];
  }
  return r;
}

int8_t int8_weight::at(int64_t row, int64_t col) const {
  return storage_[packed_offset(*this, row, col)];
}

void gemm_int8(const quantized_rows& x, const int8_weight& w, float* y, int64_t ldy,
               thread_pool& pool) {
  check_shapes(x, w, ldy);
  const auto tiling =
      detail::plan_gemm(x.rows, w.groups(), detail::target_tasks(pool.parallelism()));
  const block_fn block = pick_block();
  pool.parallel_for(tiling.tasks(), [&](int64_t t) {
    int64_t m0, m1, g0, g1;
    tiling.task(t, x.rows, w.groups(), m0, m1, g0, g1);
    block(x, w, y, ldy, m0, m1, g0, g1);
  });
}

void gemm_int8_reference(const quantized_rows& x, const int8_weight& w, float* y, int64_t ldy) {
  check_shapes(x, w, ldy);
  std::vector<int8_t> wrow(static_cast<size_t>(w.k()));
  for (int64_t n = 0; n < w.n(); ++n) {
    for (int64_t k = 0; k < w.k(); ++k) wrow[k] = w.at(n, k);
    for (int64_t m = 0; m < x.rows; ++m) {
      int32_t acc = 0;
      for (int64_t k = 0; k < w.k(); ++k) acc += int32_t{x.row(m)[k]} * int32_t{wrow[k]};
      y[m * ldy + n] = static_cast<float>(acc) * x.scale[m] * w.scale(n);
    }
  }
}

void gemm_int8_grouped(std::span<const gemm_int8_problem> problems, thread_pool& pool) {
  for (auto& pr : problems) check_shapes(*pr.x, *pr.w, pr.ldy);
  const block_fn block = pick_block();
  detail::run_grouped(
      pool, problems.size(), [&](size_t i) { return problems[i].x->rows; },
      [&](size_t i) { return problems[i].w->groups(); },
      [&](size_t i, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
        const auto& pr = problems[i];
        block(*pr.x, *pr.w, pr.y, pr.ldy, m0, m1, g0, g1);
      });
}

} // namespace supernode::kernels
