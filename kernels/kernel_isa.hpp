#pragma once
// Which instruction set the GEMM and quantization kernels run on. Chosen once per process from
// the CPU (AVX2 and FMA, else portable C++); SUPERNODE_KERNELS=portable forces the portable
// path, and tests switch paths in-process with set_kernel_isa to check both against the truth.

namespace supernode::kernels {

enum class kernel_isa { portable, avx2 };

bool kernel_isa_supported(kernel_isa isa);
kernel_isa active_kernel_isa();
// Forces a path; an unsupported ISA falls back to portable. Not meant to race running kernels.
void set_kernel_isa(kernel_isa isa);
const char* kernel_isa_name(kernel_isa isa);

} // namespace supernode::kernels
