#include "apps/bench/stop_signals.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <pthread.h>

namespace supernode::apps {

namespace {

// The registered cleanups by registration order. The watcher holds the mutex while it runs
// them, so an unregistering destructor waits until they are done.
struct cleanup_registry {
  std::mutex mutex;
  uint64_t next_id = 0;
  std::map<uint64_t, std::function<void()>> steps;
};

cleanup_registry& registry() {
  static cleanup_registry r;
  return r;
}

} // namespace

stop_signal_watcher::stop_signal_watcher(std::string who) : who_(std::move(who)) {
  sigemptyset(&set_);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set_, s);
  pthread_sigmask(SIG_BLOCK, &set_, &old_);
  thread_ = std::thread([this] { watch(); });
}

stop_signal_watcher::~stop_signal_watcher() {
  stop_ = true;
  thread_.join();
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

void stop_signal_watcher::watch() {
  // sigtimedwait, not sigwait: the destructor's flag is seen within a tick.
  const timespec tick{0, 100'000'000};
  while (!stop_) {
    const int sig = ::sigtimedwait(&set_, nullptr, &tick);
    if (sig <= 0) continue;
    std::fprintf(stderr, "%s: signal %d: cleaning up\n", who_.c_str(), sig);
    {
      std::lock_guard lock(registry().mutex);
      for (auto it = registry().steps.rbegin(); it != registry().steps.rend(); ++it) {
        try {
          it->second();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s: cleanup failed: %s\n", who_.c_str(), e.what());
        }
      }
    }
    std::fflush(stderr);
    std::_Exit(128 + sig);
  }
}

on_stop_signal::on_stop_signal(std::function<void()> step) {
  std::lock_guard lock(registry().mutex);
  id_ = registry().next_id++;
  registry().steps.emplace(id_, std::move(step));
}

on_stop_signal::~on_stop_signal() {
  std::lock_guard lock(registry().mutex);
  registry().steps.erase(id_);
}

} // namespace supernode::apps
