#pragma once
// oneDNN timed in worker processes, one per ISA cap. oneDNN fixes its ISA cap once per process
// (dnnl::set_max_cpu_isa), yet `bench kernels` compares each of our paths, in one run, against
// oneDNN native and against oneDNN capped at the same ISA. A worker is this binary re-executed
// as `supernode bench kernels --onednn-worker CAP --threads N [--quick]`: it reads "shape m"
// lines on stdin and answers each with one JSON line on stdout. It waits on a blocking read
// while the parent times our kernels, so the two never compete for the cores.

#include "apps/bench/kernel_bench_common.hpp"
#include "kernels/kernel_isa.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace supernode::apps::kernel_bench {

// The oneDNN cap that matches one of our paths ("avx2", "avx2_vnni", "avx512_core_vnni",
// "avx512_core_amx"); empty for portable, which has no oneDNN counterpart.
std::string onednn_cap_for(kernels::kernel_isa isa);

class onednn_worker {
public:
  // cap: one of onednn_cap_for's names, or "native" (no cap).
  onednn_worker(std::string cap, int threads, bool quick);
  ~onednn_worker();
  onednn_worker(const onednn_worker&) = delete;
  onednn_worker& operator=(const onednn_worker&) = delete;

  const std::string& cap() const { return cap_; }
  // oneDNN on shape s at m rows, with our per-token quantization and scale epilogue around it:
  // {"ms", "gops", "weight_gbs", "matmul_only_ms", "impl", "isa"}; null if the worker failed.
  nlohmann::json time(const shape& s, int64_t m);

private:
  std::string cap_;
  int pid_ = -1;
  std::FILE* to_ = nullptr;
  std::FILE* from_ = nullptr;
};

// The worker's side of the protocol (`--onednn-worker CAP`).
int run_onednn_worker(const std::string& cap, int threads, bool quick);

} // namespace supernode::apps::kernel_bench
