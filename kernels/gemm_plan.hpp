#pragma once
// How the GEMM drivers cut one problem into pool tasks: blocks of rows times blocks of panel
// groups. Every task writes its own rectangle of y, and the k reduction never crosses a task,
// so results do not depend on the cut (or on the number of threads).

#include "kernels/thread_pool.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

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
  // One thread has nothing to balance: every extra task re-reads and re-biases its x rows.
  const int64_t total = threads > 1 ? 8 * static_cast<int64_t>(threads) : 1;
  return std::max<int64_t>(1, (total + problems - 1) / std::max<int64_t>(1, problems));
}

// Runs `count` independent problems (the experts of a grouped GEMM) as one parallel_for over
// all their tasks, so small problems share the pool. rows(i) and groups(i) describe problem i;
// block(i, m0, m1, g0, g1) computes one of its rectangles.
template<class Rows, class Groups, class Block>
void run_grouped(thread_pool& pool, size_t count, Rows rows, Groups groups, Block block) {
  std::vector<gemm_tiling> tilings(count);
  std::vector<int64_t> first(count + 1, 0);
  const int64_t per_problem = target_tasks(pool.parallelism(), static_cast<int64_t>(count));
  for (size_t i = 0; i < count; ++i) {
    tilings[i] = plan_gemm(rows(i), groups(i), per_problem);
    first[i + 1] = first[i] + tilings[i].tasks();
  }
  pool.parallel_for(first.back(), [&](int64_t t) {
    const size_t i =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), t) - first.begin() - 1);
    int64_t m0, m1, g0, g1;
    tilings[i].task(t - first[i], rows(i), groups(i), m0, m1, g0, g1);
    block(i, m0, m1, g0, g1);
  });
}

} // namespace supernode::kernels::detail
