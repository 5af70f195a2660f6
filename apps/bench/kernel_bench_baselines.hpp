#pragma once
// The libraries the kernel benchmark compares against, behind small wrappers so their headers
// stay in one file. Each reports whether it was built in (SUPERNODE_HAVE_DNNL/OPENBLAS).

#include <cstdint>
#include <memory>
#include <string>

namespace supernode::apps::kernel_bench {

// oneDNN int8 matmul: s8 activations [m x k] (row stride ldx) times s8 weights W[n][k],
// pre-reordered once into the layout oneDNN picks, into s32 [m x n]. Scales are applied by
// the caller (oneDNN's per-token scale post-op falls back to a slow reference kernel).
class onednn_int8_matmul {
public:
  static bool available();
  // Call once per process, before any primitive exists: thread count, and the ISA cap: "avx2",
  // "avx2_vnni", "avx512_core_vnni", "avx512_core_amx" (like for like with our paths of those
  // ISAs) or "native" (whatever the CPU has, AMX included).
  static void init(int threads, const std::string& max_isa);
  static std::string effective_isa();

  onednn_int8_matmul(const int8_t* w, int64_t n, int64_t k, int64_t m, int64_t ldx);
  ~onednn_int8_matmul();
  void run(const int8_t* x, int32_t* acc);
  std::string implementation() const;

private:
  struct state;
  std::unique_ptr<state> s_;
};

bool openblas_available();
void openblas_init(int threads);
std::string openblas_core();
// y[m][n] = sum_k x[m][k] * w[n][k]: sgemv at m == 1, sgemm otherwise.
void openblas_gemm(const float* x, int64_t m, const float* w, int64_t n, int64_t k, float* y);

} // namespace supernode::apps::kernel_bench
