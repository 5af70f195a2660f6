#include "apps/bench/kernel_bench_machine.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <thread>
#include <vector>

namespace supernode::apps::kernel_bench {

namespace {
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Four independent accumulators keep the adds off the critical path: the loop is load-bound.
// With `prefetch`, software prefetches run 2 KB ahead, as the GEMV kernel's do; the figure
// reported is the better of both ways of reading.
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t bytes, bool prefetch) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    if (prefetch) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 2048), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + 2048 + 64), _MM_HINT_T0);
    }
    a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// Iterations of one timed run of a peak loop: a millisecond or less, so that on a host shared
// with other builds the best of many runs is likely one the scheduler did not interrupt (a
// 60 ms run almost never is, and measured half the real peak).
constexpr int64_t peak_iters = 200'000;
constexpr int peak_runs = 60;

template<class F>
double best_rate(F&& body, double work) {
  double best = 0.0;
  for (int r = 0; r < peak_runs; ++r) {
    const auto t0 = clock_type::now();
    body();
    best = std::max(best, work / seconds_since(t0) / 1e9);
  }
  return best;
}

// The same with `threads` threads running `body` at once, each doing `work`: every run starts
// on a barrier and counts from the first thread's start to the last one's end. So two vCPUs
// that are one core's SMT siblings, or share a power budget, show what they do together, where
// a single core's rate times the threads would overstate it.
template<class F>
double best_rate_together(F&& body, double work, int threads) {
  if (threads <= 1) return best_rate(body, work);
  std::vector<clock_type::time_point> start(static_cast<size_t>(threads * peak_runs)),
      end(start.size());
  std::barrier sync(threads);
  std::vector<std::thread> team;
  for (int t = 0; t < threads; ++t)
    team.emplace_back([&, t] {
      for (int r = 0; r < peak_runs; ++r) {
        sync.arrive_and_wait();
        const size_t slot = static_cast<size_t>(r * threads + t);
        start[slot] = clock_type::now();
        body();
        end[slot] = clock_type::now();
      }
    });
  for (auto& t : team) t.join();
  double best = 0.0;
  for (int r = 0; r < peak_runs; ++r) {
    const auto first = start.begin() + r * threads, last = end.begin() + r * threads;
    const double secs = std::chrono::duration<double>(*std::max_element(last, last + threads) -
                                                      *std::min_element(first, first + threads))
                            .count();
    best = std::max(best, work * threads / secs / 1e9);
  }
  return best;
}

// Where each loop leaves a result, so the compiler keeps the work; atomic because the peak loops
// also run on several threads at once.
std::atomic<int> sink;
} // namespace

double read_bandwidth_gbs(int threads, int mib, int reps) {
  const size_t bytes = static_cast<size_t>(mib) << 20;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  for (size_t i = 0; i < bytes; i += 4096) std::memset(buf + i, static_cast<int>(i >> 12), 4096);
  const size_t per = bytes / threads / 128 * 128;
  double best = 0.0;
  for (int r = 0; r < 2 * reps; ++r) {
    std::vector<uint64_t> partial(threads);
    std::vector<std::thread> pool;
    const auto t0 = clock_type::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { partial[t] = sum_avx2(buf + t * per, per, r % 2 == 1); });
    for (auto& t : pool) t.join();
    const double secs = seconds_since(t0);
    for (auto p : partial) sink.fetch_add(static_cast<int>(p), std::memory_order_relaxed);
    best = std::max(best, static_cast<double>(per * threads) / secs / 1e9);
  }
  std::free(buf);
  return best;
}

namespace {
// The empty asm statements make the compiler treat the operands as changed every iteration,
// so nothing is hoisted and no extra instruction is emitted.
__attribute__((target("avx2"))) void int8_loop(bool with_sign) {
  __m256i acc[8], w[8];
  for (int i = 0; i < 8; ++i) {
    acc[i] = _mm256_setzero_si256();
    w[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  }
  __m256i xb = _mm256_set1_epi32(0x01ff7f81), xa = _mm256_abs_epi8(xb);
  const __m256i ones = _mm256_set1_epi16(1);
  if (with_sign) {
    for (int64_t it = 0; it < peak_iters; ++it) {
      asm volatile("" : "+x"(xb), "+x"(xa));
      for (int i = 0; i < 8; ++i)
        acc[i] = _mm256_add_epi32(
            acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(xa, _mm256_sign_epi8(w[i], xb)), ones));
    }
  } else {
    for (int64_t it = 0; it < peak_iters; ++it) {
      asm volatile("" : "+x"(xa));
      for (int i = 0; i < 8; ++i)
        acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(xa, w[i]), ones));
    }
  }
  for (int i = 1; i < 8; ++i) acc[0] = _mm256_add_epi32(acc[0], acc[i]);
  sink.fetch_add(_mm256_extract_epi32(acc[0], 0), std::memory_order_relaxed);
}

// Same register shape as int8_loop: eight independent accumulators, one sign per product.
__attribute__((target("avx2,avxvnni"))) void int8_vnni_loop() {
  __m256i acc[8], w[8];
  for (int i = 0; i < 8; ++i) {
    acc[i] = _mm256_setzero_si256();
    w[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  }
  __m256i xb = _mm256_set1_epi32(0x01ff7f81), xa = _mm256_abs_epi8(xb);
  for (int64_t it = 0; it < peak_iters; ++it) {
    asm volatile("" : "+x"(xb), "+x"(xa));
    for (int i = 0; i < 8; ++i)
      acc[i] = _mm256_dpbusd_avx_epi32(acc[i], xa, _mm256_sign_epi8(w[i], xb));
  }
  for (int i = 1; i < 8; ++i) acc[0] = _mm256_add_epi32(acc[0], acc[i]);
  sink.fetch_add(_mm256_extract_epi32(acc[0], 0), std::memory_order_relaxed);
}

// The AVX-512 VNNI kernel's inner step is a bare vpdpbusd (x is biased once per k block, outside
// it); twelve independent accumulators cover its latency. Written in asm: GCC 12 copies every
// accumulator around the destructive intrinsic, which would measure the copies.
__attribute__((target("avx512f,avx512vnni"))) void int8_avx512_vnni_loop() {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
          a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0;
  const __m512i xu = _mm512_set1_epi32(0x01ff7f81), w = _mm512_set1_epi8(3);
  for (int64_t it = 0; it < peak_iters / 2; ++it)
    asm volatile("vpdpbusd %[w], %[x], %[a0]\n\tvpdpbusd %[w], %[x], %[a1]\n\t"
                 "vpdpbusd %[w], %[x], %[a2]\n\tvpdpbusd %[w], %[x], %[a3]\n\t"
                 "vpdpbusd %[w], %[x], %[a4]\n\tvpdpbusd %[w], %[x], %[a5]\n\t"
                 "vpdpbusd %[w], %[x], %[a6]\n\tvpdpbusd %[w], %[x], %[a7]\n\t"
                 "vpdpbusd %[w], %[x], %[a8]\n\tvpdpbusd %[w], %[x], %[a9]\n\t"
                 "vpdpbusd %[w], %[x], %[a10]\n\tvpdpbusd %[w], %[x], %[a11]"
                 : [a0] "+v"(a0), [a1] "+v"(a1), [a2] "+v"(a2), [a3] "+v"(a3), [a4] "+v"(a4),
                   [a5] "+v"(a5), [a6] "+v"(a6), [a7] "+v"(a7), [a8] "+v"(a8), [a9] "+v"(a9),
                   [a10] "+v"(a10), [a11] "+v"(a11)
                 : [x] "v"(xu), [w] "v"(w));
  for (__m512i a : {a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11}) a0 = _mm512_add_epi32(a0, a);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, a0);
  sink.fetch_add(lanes[0], std::memory_order_relaxed);
}

// Four independent TDPBSSDs per iteration (2 x 2 accumulators, as the kernel's tiles), each
// 16 x 16 x 64 multiply-adds; the operands stay in tiles. Configures the tiles itself (the
// GEMM re-checks the configuration on every call) and releases them afterwards.
constexpr int64_t amx_peak_iters = 20'000;
__attribute__((target("amx-tile,amx-int8"))) void int8_amx_loop() {
  alignas(64) uint8_t config[64] = {1}; // palette 1; eight tiles of 16 rows x 64 bytes
  for (int t = 0; t < 8; ++t) {
    config[16 + 2 * t] = 64;
    config[48 + t] = 16;
  }
  alignas(64) int8_t src[16 * 64];
  for (int i = 0; i < 16 * 64; ++i) src[i] = static_cast<int8_t>(i % 7 - 3);
  alignas(64) int32_t out[16 * 16];
  _tile_loadconfig(config);
  _tile_loadd(4, src, 64);
  _tile_loadd(5, src, 64);
  _tile_loadd(6, src, 64);
  _tile_loadd(7, src, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t it = 0; it < amx_peak_iters; ++it) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  sink.fetch_add(out[0], std::memory_order_relaxed);
}

__attribute__((target("avx2,fma"))) void fma_loop() {
  __m256 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < peak_iters; ++it) {
    asm volatile("" : "+x"(a), "+x"(b));
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  for (int i = 1; i < 10; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  sink.fetch_add(static_cast<int>(_mm256_cvtss_f32(acc[0])), std::memory_order_relaxed);
}
} // namespace

double int8_maddubs_peak_gops() {
  return best_rate([] { int8_loop(false); }, 2.0 * 32 * 8 * peak_iters);
}

double exact_int8_peak_gops(kernels::kernel_isa isa, int threads) {
  switch (isa) {
  case kernels::kernel_isa::avx2:
    return best_rate_together([] { int8_loop(true); }, 2.0 * 32 * 8 * peak_iters, threads);
  case kernels::kernel_isa::avx_vnni:
    return best_rate_together([] { int8_vnni_loop(); }, 2.0 * 32 * 8 * peak_iters, threads);
  case kernels::kernel_isa::avx512_vnni:
    return best_rate_together([] { int8_avx512_vnni_loop(); }, 2.0 * 64 * 12 * (peak_iters / 2),
                              threads);
  case kernels::kernel_isa::amx:
    return best_rate_together([] { int8_amx_loop(); }, 2.0 * 4 * 16 * 16 * 64 * amx_peak_iters,
                              threads);
  case kernels::kernel_isa::portable:
    break;
  }
  return 0.0;
}

double fp32_fma_peak_gflops() {
  return best_rate([] { fma_loop(); }, 2.0 * 8 * 10 * peak_iters);
}

} // namespace supernode::apps::kernel_bench
