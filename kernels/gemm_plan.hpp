#pragma once
// How the GEMM drivers cut one problem into pool tasks: blocks of rows times blocks of panel
// groups. Every task writes its own rectangle of y, and the k reduction never crosses a task,
// so results do not depend on the cut (or on the number of threads).

#include <algorithm>
#include <cstdint>

namespace supernode::kernels::detail {

struct gemm_tiling {
  int64_t row_block = 1, group_block = 1, row_blocks = 0, group_blocks = 0;
  int64_t tasks() const { return row_blocks * group_blocks; }
  // Task t covers rows [m0, m1) and groups [g0, g1).
  void task(int64_t t, int64_t m, int64_t groups, int64_t& m0, int64_t& m1, int64_t& g0,
            int64_t& g1) const {
    const int64_t gb = t / row_blocks, rb = t % row_blocks;
    m0 = rb * row_block;
    m1 = std::min(m, m0 + row_block);
    g0 = gb * group_block;
    g1 = std::min(groups, g0 + group_block);
  }
};

// Large M is cut into row blocks that keep an x block in L2 while the weights stream past;
// columns are cut into about `target_tasks` pieces (never finer than one group, never coarser
// than 16) so each thread gets several tasks to balance.
inline gemm_tiling plan_gemm(int64_t m, int64_t groups, int64_t target_tasks) {
  gemm_tiling t;
  if (m <= 0 || groups <= 0) return t;
  t.row_block = m <= 96 ? m : 64;
  t.row_blocks = (m + t.row_block - 1) / t.row_block;
  const int64_t want = std::max<int64_t>(1, (target_tasks + t.row_blocks - 1) / t.row_blocks);
  t.group_block = std::clamp<int64_t>((groups + want - 1) / want, 1, 16);
  t.group_blocks = (groups + t.group_block - 1) / t.group_block;
  return t;
}

// Tasks wanted for one problem alone, and for each of `problems` scheduled together.
inline int64_t target_tasks(int threads, int64_t problems = 1) {
  const int64_t total = 8 * static_cast<int64_t>(threads);
  return std::max<int64_t>(1, (total + problems - 1) / std::max<int64_t>(1, problems));
}

} // namespace supernode::kernels::detail
