#include "kernels/kernel_isa.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace supernode::kernels {

namespace {
bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

kernel_isa initial_isa() {
  const char* env = std::getenv("SUPERNODE_KERNELS");
  if (env && std::strcmp(env, "portable") == 0) return kernel_isa::portable;
  return cpu_has_avx2_fma() ? kernel_isa::avx2 : kernel_isa::portable;
}

std::atomic<kernel_isa>& active_slot() {
  static std::atomic<kernel_isa> isa{initial_isa()};
  return isa;
}
} // namespace

bool kernel_isa_supported(kernel_isa isa) {
  return isa == kernel_isa::portable || cpu_has_avx2_fma();
}

kernel_isa active_kernel_isa() {
  return active_slot().load(std::memory_order_relaxed);
}

void set_kernel_isa(kernel_isa isa) {
  active_slot().store(kernel_isa_supported(isa) ? isa : kernel_isa::portable,
                      std::memory_order_relaxed);
}

const char* kernel_isa_name(kernel_isa isa) {
  return isa == kernel_isa::avx2 ? "avx2" : "portable";
}

} // namespace supernode::kernels
