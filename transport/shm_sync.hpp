#pragma once
// Cross-process wake-ups and liveness for the shm plane. Everything here works on words that
// live in a shared segment, so futexes are the shared (not PRIVATE) kind and every atomic is a
// lock-free, address-free 32- or 64-bit word.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <sys/types.h>

namespace supernode::transport {

static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free to be address-free across processes");

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// sched_yield(): out of line so this header does not pull in <sched.h>.
void yield_cpu();

// Sleeps while *word == expected, at most `timeout`. Returns early on a wake, a signal or a
// changed word; callers always re-check their condition.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);
void futex_wake_all(std::atomic<uint32_t>* word);

// A wake-up channel in shared memory: a sleeper spins briefly on its own condition, then sleeps
// on `seq`; the signaller pays a syscall only when someone sleeps (`waiters` > 0).
//
// Ordering (the store-buffer pattern, closed by a seq_cst fence on each side):
//   signaller: publish state (release) ; fence ; if (waiters) { ++seq ; wake }
//   sleeper:   ++waiters ; fence ; s = seq ; if (ready()) return ; futex_wait(seq, s)
// Either the signaller sees the waiter and bumps seq (so futex_wait returns at once or is woken),
// or the sleeper's ready() sees the published state. No wake-up is lost.
struct doorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> waiters{0};

  void ring() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (waiters.load(std::memory_order_relaxed) != 0) {
      seq.fetch_add(1, std::memory_order_release);
      futex_wake_all(&seq);
    }
  }

  // True once ready() holds; false at the deadline. Spins for `spin` first, because a futex
  // wake-up costs several microseconds and most waits on a busy plane are shorter than that.
  template<class Ready>
  bool wait(Ready ready, std::chrono::nanoseconds spin,
            std::chrono::steady_clock::time_point deadline) {
    using clock = std::chrono::steady_clock;
    if (ready()) return true;
    if (spin.count() > 0) {
      const auto spin_start = clock::now();
      const auto spin_end = spin_start + spin;
      for (unsigned i = 1;; ++i) {
        if (ready()) return true;
        cpu_relax();
        if ((i & 63) == 0) {
          const auto t = clock::now();
          if (t >= spin_end || t >= deadline) break;
          // After a few microseconds, let a thread that shares our core run: when both ends
          // of a ring land on one core, the other end is waiting for exactly this core, and
          // without yielding every round trip costs two full spins.
          if (t - spin_start > std::chrono::microseconds(5)) yield_cpu();
        }
      }
    }
    for (;;) {
      waiters.fetch_add(1, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const uint32_t s = seq.load(std::memory_order_acquire);
      if (ready()) {
        waiters.fetch_sub(1, std::memory_order_relaxed);
        return true;
      }
      const auto t = clock::now();
      if (t >= deadline) {
        waiters.fetch_sub(1, std::memory_order_relaxed);
        return false;
      }
      futex_wait(&seq, s, deadline - t);
      waiters.fetch_sub(1, std::memory_order_relaxed);
      if (ready()) return true;
    }
  }
};

// The kernel's start time of a process (clock ticks since boot), or 0 when it is gone or a
// zombie. Paired with the pid it names one process even after pids wrap around.
uint64_t process_start_time(pid_t pid);
// A process that is running and, when start_time != 0, is the same incarnation.
bool process_alive(pid_t pid, uint64_t start_time);

} // namespace supernode::transport
