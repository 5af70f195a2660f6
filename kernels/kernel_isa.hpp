#pragma once
// Which instruction set the GEMM and quantization kernels run on. Chosen once per process from
// the CPU (the best of AMX, AVX-512 VNNI, AVX-VNNI, AVX2 and FMA, else portable C++);
// SUPERNODE_KERNELS=portable|avx2|avx_vnni|avx512_vnni|amx forces a path, and tests switch
// paths in-process with set_kernel_isa to check each against the truth. Every path gives
// bit-identical results.

namespace supernode::kernels {

// Ordered by preference. Every SIMD path needs AVX2 and FMA; avx512_vnni does not need
// avx_vnni (AMD Zen 4 has AVX-512 VNNI without the VEX form), and amx needs avx512_vnni (every
// AMX CPU has it: the AMX kernel leaves rows short of a tile to it). The paths above avx2 change
// the INT8 GEMM; the FP32 GEMM runs its AVX-512 code under avx512_vnni and amx (the same bits as
// its AVX2 code), as do the prefill attention tiles (AVX2 code under avx2 and avx_vnni), and
// quantization its AVX2 code under every SIMD path.
enum class kernel_isa { portable, avx2, avx_vnni, avx512_vnni, amx };
inline constexpr kernel_isa all_kernel_isas[] = {kernel_isa::portable, kernel_isa::avx2,
                                                 kernel_isa::avx_vnni, kernel_isa::avx512_vnni,
                                                 kernel_isa::amx};

bool kernel_isa_supported(kernel_isa isa);
// The most preferred path the CPU supports (the default unless SUPERNODE_KERNELS says otherwise).
kernel_isa best_kernel_isa();
kernel_isa active_kernel_isa();
// Forces a path; an unsupported ISA falls back to the best supported one below it. Not meant
// to race running kernels.
void set_kernel_isa(kernel_isa isa);
const char* kernel_isa_name(kernel_isa isa);
// Inverse of kernel_isa_name; false for an unknown name.
bool parse_kernel_isa(const char* name, kernel_isa& isa);

// Whether the CPU (and OS) can run AVX-512 BF16 (vdpbf16ps), for the optional BF16 attention
// scores; independent of the active path.
bool kernel_isa_avx512_bf16_supported();

// Whether the CPU is AMD's, for the few tuning choices measured to differ by vendor (the
// one-row INT8 GEMV's software prefetch); read once.
bool cpu_is_amd();

// Whether the AVX2 code of quantization and the FP32 GEMM may run under `isa`.
inline bool kernel_isa_has_avx2(kernel_isa isa) {
  return isa != kernel_isa::portable;
}

// Whether the AVX-512 code of the FP32 GEMM may run under `isa`.
inline bool kernel_isa_has_avx512(kernel_isa isa) {
  return isa == kernel_isa::avx512_vnni || isa == kernel_isa::amx;
}

} // namespace supernode::kernels
