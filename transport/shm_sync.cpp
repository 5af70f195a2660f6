#include "transport/shm_sync.hpp"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace supernode::transport {

void yield_cpu() {
  sched_yield();
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
  // FUTEX_WAIT (not FUTEX_WAIT_PRIVATE): the word is shared with other processes.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

uint64_t process_start_time(pid_t pid) {
  if (pid <= 0) return 0;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return 0;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // The command name may hold spaces and parentheses: fields restart after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  ++p;
  char state = 0;
  if (std::sscanf(p, " %c", &state) != 1 || state == 'Z' || state == 'X' || state == 'x') return 0;
  // starttime is field 22; after ')' we are at field 3.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p + 1, ' ');
    if (!p) return 0;
  }
  unsigned long long start = 0;
  if (std::sscanf(p, " %llu", &start) != 1) return 0;
  return start == 0 ? 1 : start; // 0 means "gone"; a process started at tick 0 is still alive
}

bool process_alive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  const uint64_t now = process_start_time(pid);
  if (now == 0) return false;
  return start_time == 0 || now == start_time;
}

} // namespace supernode::transport
