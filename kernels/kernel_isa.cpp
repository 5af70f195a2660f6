#include "kernels/kernel_isa.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
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

// XCR0: which register states the OS saves on a context switch.
unsigned long long xcr0() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1u)) return 0; // no OSXSAVE
  unsigned lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

bool request_amx_permission() {
  // Linux keeps the 8 KB tile data state out of every thread's context until the process asks
  // for it (Documentation/arch/x86/xstate.rst); until then the first tile instruction faults.
  // The grant covers every thread of the process, present and future.
  constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
}

bool cpu_has_amx_int8() {
  // CPUID.(7,0):EDX[24] AMX-TILE, [25] AMX-INT8; XCR0[17] XTILECFG, [18] XTILEDATA.
  static const bool ok = [] {
    const leaf7 l = cpuid7(0);
    const bool cpu = ((l.edx >> 24) & 1u) && ((l.edx >> 25) & 1u);
    const bool os = ((xcr0() >> 17) & 3u) == 3u;
    return cpu_has_avx512_vnni() && cpu && os && request_amx_permission();
  }();
  return ok;
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
  case kernel_isa::amx:
    return cpu_has_amx_int8();
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
  kernel_isa isa = kernel_isa::amx;
  if (const char* env = std::getenv("SUPERNODE_KERNELS")) parse_kernel_isa(env, isa);
  return best_up_to(isa);
}

std::atomic<kernel_isa>& active_slot() {
  static std::atomic<kernel_isa> isa{initial_isa()};
  return isa;
}
} // namespace

bool cpu_is_amd() {
#if defined(__x86_64__)
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
#else
  return false;
#endif
}

bool kernel_isa_avx512_bf16_supported() {
#if defined(__x86_64__)
  // CPUID.(EAX=7,ECX=1):EAX[5] AVX512_BF16; the OS state check comes with AVX-512F's.
  return cpu_has_avx512_vnni() && ((cpuid7(1).eax >> 5) & 1u);
#else
  return false;
#endif
}

bool kernel_isa_supported(kernel_isa isa) {
  return supported(isa);
}

kernel_isa best_kernel_isa() {
  return best_up_to(kernel_isa::amx);
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
  case kernel_isa::amx:
    return "amx";
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
