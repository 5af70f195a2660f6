#pragma once
// `supernode bench kernels`: our INT8/FP32 GEMMs against oneDNN's int8 matmul and OpenBLAS
// sgemm/sgemv on the small model's weight shapes; prints one JSON object.

namespace supernode::apps {
// argv holds the arguments after `supernode bench kernels`: [--threads N] [--quick]
// [--onednn-isa avx2|avx2_vnni|native] [--isa avx2,avx_vnni] [--int8-only]
// [--shapes q_a,lm_head,...] [--m 1,8,...]. --isa lists the INT8 paths to time side by side
// (default: every SIMD path the CPU has); the first is the headline "ours_int8".
int run_kernel_bench(int argc, char** argv);
} // namespace supernode::apps
