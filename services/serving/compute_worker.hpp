#pragma once
// The compute thread of a prefill or decode instance: sleeps until there is work (or a stop),
// runs one round of it, and repeats. The owner's message handlers share state with the
// thread under mutex() and call notify() after adding work.

#include "services/moe/ep_rank.hpp"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace supernode::services {

class compute_worker {
public:
  ~compute_worker() { stop(); }

  // `has_work` runs with mutex() held; `round` and `at_exit` without it, on the thread.
  void start(std::function<bool()> has_work, std::function<void()> round,
             std::function<void()> at_exit = {}) {
    thread_ = std::thread([this, has_work = std::move(has_work), round = std::move(round),
                           at_exit = std::move(at_exit)] {
      for (;;) {
        {
          std::unique_lock lock(mutex_);
          wake_.wait(lock, [&] { return stopping_ || has_work(); });
          if (stopping_) break;
        }
        round();
      }
      if (at_exit) at_exit();
    });
  }
  // The same for a rank of an expert-parallel group: it forms the group with its peers first
  // (and again whenever the members change, between rounds), and while it has nothing of its
  // own it takes part in the forwards its peers start, sleeping on the group's doorbell (which
  // notify() rings) when nobody computes.
  void start_in_group(ep_rank& group, std::function<bool()> has_work, std::function<void()> round,
                      std::function<void()> at_exit = {}) {
    group_ = &group;
    thread_ = std::thread([this, &group, has_work = std::move(has_work), round = std::move(round),
                           at_exit = std::move(at_exit)] {
      auto stopping = [this] {
        std::lock_guard lock(mutex_);
        return stopping_;
      };
      for (;;) {
        // Between steps: the group forms (first) or re-forms (a member died or came back).
        if (group.wants_reform()) group.form(stopping);
        const auto seen = group.doorbell_value();
        bool local;
        {
          std::lock_guard lock(mutex_);
          if (stopping_) break;
          local = has_work();
        }
        if (local) {
          round();
          continue;
        }
        if (group.serve_peers()) continue;
        group.sleep(seen, std::chrono::milliseconds(group.forming_next() ? 2 : 100));
      }
      if (at_exit) at_exit();
    });
  }
  // Finishes the round in progress, runs at_exit and joins. Idempotent.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    notify();
    if (thread_.joinable()) thread_.join();
  }
  void notify() {
    wake_.notify_all();
    if (group_) group_->ring();
  }
  std::mutex& mutex() { return mutex_; }

private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  ep_rank* group_ = nullptr;
  std::thread thread_;
};

} // namespace supernode::services
