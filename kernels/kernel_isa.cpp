#include "kernels/kernel_isa.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace supernode::kernels {

namespace {
#if defined(__x86_64__)
bool cpu_has_avx2_fma() {
  // libgcc also checks that the OS saves the YMM state (XCR0) before reporting AVX2.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// CPUID leaf 7, sub-leaf `sub`; zeros where the CPU has no leaf 7.
struct leaf7 {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};
leaf7 cpuid7(unsigned sub) {
  leaf7 r;
  if (__get_cpuid_max(0, nullptr) >= 7) __cpuid_count(7, sub, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

bool cpu_has_avx_vnni() {
  // gcc 12's __builtin_cpu_supports does not know "avxvnni": read CPUID.(EAX=7,ECX=1):EAX[4].
  // AVX-VNNI is VEX-encoded on YMM registers, so the OS check that comes with AVX2 covers it.
  return cpu_has_avx2_fma() && ((cpuid7(1).eax >> 4) & 1u);
}

bool cpu_has_avx512_vnni() {
  // libgcc reports AVX-512 features only when XCR0 shows the OS saves the opmask and ZMM state.
  return cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}

#endif

bool supported(kernel_isa isa) {
  switch (isa) {
  case kernel_isa::portable:
    return true;
#if defined(__x86_64__)
  case kernel_isa::avx2:
    return cpu_has_avx2_fma();
  case kernel_isa::avx_vnni:
    return cpu_has_avx_vnni();
  case kernel_isa::avx512_vnni:
    return cpu_has_avx512_vnni();
#else
  default:
    return false;
#endif
  }
  return false;
}

kernel_isa best_up_to(kernel_isa isa) {
  while (isa != kernel_isa::portable && !supported(isa))
    isa = static_cast<kernel_isa>(static_cast<int>(isa) - 1);
  return isa;
}

kernel_isa initial_isa() {
  kernel_isa isa = kernel_isa::avx512_vnni;
  if (const char* env = std::getenv("SUPERNODE_KERNELS")) parse_kernel_isa(env, isa);
  return best_up_to(isa);
}

std::atomic<kernel_isa>& active_slot() {
  static std::atomic<kernel_isa> isa{initial_isa()};
  return isa;
}
} // namespace

bool kernel_isa_supported(kernel_isa isa) {
  return supported(isa);
}

kernel_isa best_kernel_isa() {
  return best_up_to(kernel_isa::avx512_vnni);
}

kernel_isa active_kernel_isa() {
  return active_slot().load(std::memory_order_relaxed);
}

void set_kernel_isa(kernel_isa isa) {
  active_slot().store(best_up_to(isa), std::memory_order_relaxed);
}

const char* kernel_isa_name(kernel_isa isa) {
  switch (isa) {
  case kernel_isa::avx2:
    return "avx2";
  case kernel_isa::avx_vnni:
    return "avx_vnni";
  case kernel_isa::avx512_vnni:
    return "avx512_vnni";
  default:
    return "portable";
  }
}

bool parse_kernel_isa(const char* name, kernel_isa& isa) {
  for (kernel_isa i : all_kernel_isas)
    if (std::strcmp(name, kernel_isa_name(i)) == 0) {
      isa = i;
      return true;
    }
  return false;
}

} // namespace supernode::kernels
