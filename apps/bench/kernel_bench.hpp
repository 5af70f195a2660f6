#pragma once
// `supernode bench kernels`: our INT8/FP32 GEMMs against oneDNN's int8 matmul and OpenBLAS
// sgemm/sgemv on the small model's weight shapes; prints one JSON object.

namespace supernode::apps {
// argv holds the arguments after `supernode bench kernels`: [--threads N] [--quick]
// [--onednn-isa native|avx2|avx2_vnni|avx512_core_vnni] [--isa avx512_vnni,avx2] [--int8-only]
// [--shapes q_a,lm_head,...] [--m 1,8,...]. --isa lists the INT8 paths to time side by side
// (default: every SIMD path the CPU has); the first is the headline "ours_int8". --onednn-isa
// caps the headline oneDNN baseline (default native); each path is also timed against oneDNN
// capped at that path's ISA. --pairs N times the headline path N more times per row, each
// round beside oneDNN native and the exact-step peak probe, for ratios that share the host's
// phase.
int run_kernel_bench(int argc, char** argv);
} // namespace supernode::apps
