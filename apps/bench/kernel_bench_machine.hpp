#pragma once
// Machine ceilings measured in the same run as the kernels (the host is shared and noisy):
// read bandwidth with AVX2 loads, and the instruction-mix peaks of each INT8 path's inner loop.

#include "kernels/kernel_isa.hpp"

namespace supernode::apps::kernel_bench {

// GB/s summing a buffer of `mib` MiB with `threads` threads: best of `reps` passes with
// software prefetch and `reps` without.
double read_bandwidth_gbs(int threads, int mib = 256, int reps = 5);
// The inexact u8*s8 step (vpmaddubsw, vpmaddwd, vpaddd, no vpsignb) with operands in
// registers: what a saturating kernel (oneDNN's AVX2 path) can reach. Single-core GOPS, 2 ops per
// multiply-add.
double int8_maddubs_peak_gops();
// GOPS of the exact step of the INT8 kernel path `isa`, operands in registers, with `threads`
// threads running it at once (summed): AVX2's sign trick (vpsignb, vpmaddubsw, vpmaddwd,
// vpaddd), AVX-VNNI's (vpsignb, vpdpbusd), AVX-512 VNNI's vpdpbusd on ZMM (x biased outside
// the loop), AMX's TDPBSSD on 2 x 2 tiles. 0 for portable, which has no SIMD step. Only call
// for a path the CPU supports (for AMX, kernel_isa_supported(amx) asks for the tile permission).
double exact_int8_peak_gops(kernels::kernel_isa isa, int threads = 1);
// Single-core GFLOPS of independent 256-bit FMAs.
double fp32_fma_peak_gflops();

} // namespace supernode::apps::kernel_bench
