#pragma once
// Machine ceilings measured in the same run as the kernels (the host is shared and noisy):
// read bandwidth with AVX2 loads, and the instruction-mix peaks of each INT8 path's inner loop.

#include "kernels/kernel_isa.hpp"

namespace supernode::apps::kernel_bench {

// GB/s summing a buffer of `mib` MiB with `threads` threads: best of `reps` passes with
// software prefetch and `reps` without.
double read_bandwidth_gbs(int threads, int mib = 256, int reps = 5);
// Single-core GOPS (2 ops per multiply-add) of the exact sign-trick INT8 step
// (vpsignb, vpmaddubsw, vpmaddwd, vpaddd) with operands in registers.
double int8_sign_trick_peak_gops();
// The same without vpsignb (what an inexact u8*s8 kernel can reach).
double int8_maddubs_peak_gops();
// The AVX-VNNI kernel's exact step (vpsignb, vpdpbusd). Only call when the CPU has AVX-VNNI.
double int8_vnni_sign_trick_peak_gops();
// The AVX-512 VNNI kernel's exact step (vpdpbusd on ZMM, x biased outside the loop). Only call
// when the CPU has AVX-512 VNNI.
double int8_avx512_vnni_peak_gops();
// The AMX kernel's step (TDPBSSD on 2 x 2 tiles). Only call when the CPU has AMX-INT8 and the
// process holds the tile permission (kernel_isa_supported(amx) asks for it).
double int8_amx_peak_gops();
// The exact step of the INT8 kernel path `isa` (0 for portable, which has no SIMD step).
// Only call for a path the CPU supports.
double exact_int8_peak_gops(kernels::kernel_isa isa);
// Single-core GFLOPS of independent 256-bit FMAs.
double fp32_fma_peak_gflops();

} // namespace supernode::apps::kernel_bench
