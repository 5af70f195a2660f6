#include "kernels/gemm_fp32.hpp"

#include "kernels/gemm_plan.hpp"
#include "kernels/kernel_isa.hpp"

#include <algorithm>
#include <stdexcept>
#if defined(__x86_64__)
#include "kernels/arch/x86/avx2_kernels.hpp"
#include "kernels/arch/x86/avx512_kernels.hpp"
#endif

namespace supernode::kernels {

namespace {
constexpr int64_t pc = fp32_weight::panel_cols, gpn = fp32_weight::group_panels;

// Each output is one running sum over k = 0, 1, ..., K-1, whatever M or the tile. This file is
// built with -ffp-contract=off so the compiler cannot fuse some of those steps and not others.
void gemm_fp32_block_portable(const float* x, int64_t ldx, const fp32_weight& w, float* y,
                              int64_t ldy, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  const int64_t k = w.k();
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t gp = w.panels_in_group(g);
    const float* base = w.group_data(g);
    for (int64_t p = 0; p < gp; ++p) {
      const int64_t col0 = (g * gpn + p) * pc, ncols = std::min(pc, w.n() - col0);
      for (int64_t m = m0; m < m1; ++m) {
        const float* xr = x + m * ldx;
        float acc[pc] = {};
        for (int64_t kk = 0; kk < k; ++kk) {
          const float* wp = base + (kk * gp + p) * pc;
          for (int64_t c = 0; c < pc; ++c) acc[c] = acc[c] + xr[kk] * wp[c];
        }
        std::copy_n(acc, ncols, y + m * ldy + col0);
      }
    }
  }
}

using block_fn = void (*)(const float*, int64_t, const fp32_weight&, float*, int64_t, int64_t,
                          int64_t, int64_t, int64_t);

#if defined(__x86_64__)
static_assert(avx2::fp32_panel_cols == pc && avx2::fp32_group_panels == gpn);

void gemm_fp32_block_avx2(const float* x, int64_t ldx, const fp32_weight& w, float* y, int64_t ldy,
                          int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  const avx2::fp32_operands o{x, ldx, w.packed(), w.n(), w.k(), y, ldy};
  avx2::gemm_fp32_block(o, m0, m1, g0, g1);
}

void gemm_fp32_block_avx512(const float* x, int64_t ldx, const fp32_weight& w, float* y,
                            int64_t ldy, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
  const avx2::fp32_operands o{x, ldx, w.packed(), w.n(), w.k(), y, ldy};
  avx512::gemm_fp32_block(o, m0, m1, g0, g1);
}
#endif

block_fn pick_block() {
#if defined(__x86_64__)
  const kernel_isa isa = active_kernel_isa();
  if (kernel_isa_has_avx512(isa)) return gemm_fp32_block_avx512;
  if (kernel_isa_has_avx2(isa)) return gemm_fp32_block_avx2;
#endif
  return gemm_fp32_block_portable;
}

void check_shapes(int64_t m, int64_t ldx, const fp32_weight& w, int64_t ldy) {
  if (m > 1 && (ldx < w.k() || ldy < w.n()))
    throw std::invalid_argument("gemm_fp32: ldx < k or ldy < n");
}
} // namespace

fp32_weight fp32_weight::pack(const float* w, int64_t n, int64_t k) {
  fp32_weight r;
  r.n_ = n;
  r.k_ = k;
  r.packed_.assign(static_cast<size_t>(r.panels() * pc * k), 0.0f);
  for (int64_t c = 0; c < n; ++c) {
    const int64_t panel = c / pc, g = panel / gpn, p = panel % gpn, gp = r.panels_in_group(g);
    float* dst = r.packed_.data() + g * gpn * pc * k + p * pc + c % pc;
    for (int64_t kk = 0; kk < k; ++kk) dst[kk * gp * pc] = w[c * k + kk];
  }
  return r;
}

float fp32_weight::at(int64_t row, int64_t col) const {
  const int64_t panel = row / pc, g = panel / gpn, p = panel % gpn;
  return group_data(g)[col * panels_in_group(g) * pc + p * pc + row % pc];
}

void gemm_fp32(const float* x, int64_t m, int64_t ldx, const fp32_weight& w, float* y, int64_t ldy,
               thread_pool& pool) {
  check_shapes(m, ldx, w, ldy);
  const auto tiling = detail::plan_gemm(m, w.groups(), detail::target_tasks(pool.parallelism()));
  const block_fn block = pick_block();
  pool.parallel_for(tiling.tasks(), [&](int64_t t) {
    int64_t m0, m1, g0, g1;
    tiling.task(t, m, w.groups(), m0, m1, g0, g1);
    block(x, ldx, w, y, ldy, m0, m1, g0, g1);
  });
}

void gemm_fp32_reference(const float* x, int64_t m, int64_t ldx, const fp32_weight& w, float* y,
                         int64_t ldy) {
  check_shapes(m, ldx, w, ldy);
  std::vector<float> wrow(static_cast<size_t>(w.k()));
  for (int64_t n = 0; n < w.n(); ++n) {
    for (int64_t k = 0; k < w.k(); ++k) wrow[k] = w.at(n, k);
    for (int64_t r = 0; r < m; ++r) {
      double acc = 0.0;
      for (int64_t k = 0; k < w.k(); ++k) acc += static_cast<double>(x[r * ldx + k]) * wrow[k];
      y[r * ldy + n] = static_cast<float>(acc);
    }
  }
}

void gemm_fp32_grouped(std::span<const gemm_fp32_problem> problems, thread_pool& pool) {
  for (auto& pr : problems) check_shapes(pr.m, pr.ldx, *pr.w, pr.ldy);
  const block_fn block = pick_block();
  detail::run_grouped(
      pool, problems.size(), [&](size_t i) { return problems[i].m; },
      [&](size_t i) { return problems[i].w->groups(); },
      [&](size_t i, int64_t m0, int64_t m1, int64_t g0, int64_t g1) {
        const auto& pr = problems[i];
        block(pr.x, pr.ldx, *pr.w, pr.y, pr.ldy, m0, m1, g0, g1);
      });
}

} // namespace supernode::kernels
