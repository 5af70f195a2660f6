#pragma once
// `supernode bench kernels`: our INT8/FP32 GEMMs against oneDNN's int8 matmul and OpenBLAS
// sgemm/sgemv on the small model's weight shapes; prints one JSON object.

namespace supernode::apps {
// argv holds the arguments after `supernode bench kernels`: [--threads N] [--quick]
// [--onednn-isa avx2|native] [--shapes q_a,lm_head,...] [--m 1,8,...].
int run_kernel_bench(int argc, char** argv);
} // namespace supernode::apps
