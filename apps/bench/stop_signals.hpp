#pragma once
// Cleaning up when a benchmark is interrupted: the clusters, pool processes and large local
// copies a bench makes must not outlive it. While a stop_signal_watcher lives, SIGINT, SIGTERM
// and SIGHUP are blocked in the thread that made it and in every thread started after (so make
// it before any), and its own thread takes them: it runs the registered cleanups, newest first,
// and exits with 128 + the signal. Cleanups run outside any signal handler, so they may launch
// processes (`cluster down`) and allocate.

#include <atomic>
#include <csignal>
#include <functional>
#include <string>
#include <thread>

namespace supernode::apps {

class stop_signal_watcher {
public:
  // `who` prefixes the message printed when a signal arrives.
  explicit stop_signal_watcher(std::string who);
  ~stop_signal_watcher();
  stop_signal_watcher(const stop_signal_watcher&) = delete;
  stop_signal_watcher& operator=(const stop_signal_watcher&) = delete;

private:
  void watch();

  std::string who_;
  sigset_t set_{}, old_{};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A cleanup the watcher runs on a stop signal while this object lives. Its destructor waits for
// a cleanup that is running, so what the step uses may go right after it.
class on_stop_signal {
public:
  explicit on_stop_signal(std::function<void()> step);
  ~on_stop_signal();
  on_stop_signal(const on_stop_signal&) = delete;
  on_stop_signal& operator=(const on_stop_signal&) = delete;

private:
  uint64_t id_;
};

} // namespace supernode::apps
