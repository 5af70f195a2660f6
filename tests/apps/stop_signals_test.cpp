// The benches' stop-signal watcher, in a forked child (it ends the process): a stop signal runs
// the registered cleanups newest first and exits with 128 + the signal; a cleanup whose
// registration is gone does not run; without a signal nothing runs.

#include "apps/bench/stop_signals.hpp"
#include "services/cluster/process_launcher.hpp"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <unistd.h>

namespace cl = supernode::services::cluster;
using supernode::apps::on_stop_signal;
using supernode::apps::stop_signal_watcher;
using namespace std::chrono_literals;

namespace {

class stop_signals_fixture : public ::testing::Test {
protected:
  void SetUp() override {
    log_ = std::filesystem::temp_directory_path() /
           ("stop-signals-test-" + std::to_string(::getpid()) + ".log");
    std::filesystem::remove(log_);
  }
  void TearDown() override { std::filesystem::remove(log_); }

  std::function<void()> note(const std::string& what) const {
    return [what, log = log_] { std::ofstream(log, std::ios::app) << what << "\n"; };
  }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::filesystem::path log_;
};

} // namespace

TEST_F(stop_signals_fixture, a_signal_runs_the_live_cleanups_newest_first_and_exits) {
  auto child = cl::child_process::fork_running([&] {
    const stop_signal_watcher watcher("stop-signals-test");
    const on_stop_signal first(note("first"));
    { const on_stop_signal gone(note("gone")); }
    const on_stop_signal second(note("second"));
    ::kill(::getpid(), SIGTERM);
    for (;;) ::pause(); // the watcher ends the process
    return 0;
  });
  const auto status = child.wait_for(30s);
  ASSERT_TRUE(status);
  EXPECT_EQ(status->code(), 128 + SIGTERM);
  EXPECT_EQ(log(), "second\nfirst\n");
}

TEST_F(stop_signals_fixture, without_a_signal_nothing_runs_and_the_mask_is_restored) {
  auto child = cl::child_process::fork_running([&] {
    sigset_t before, after;
    pthread_sigmask(SIG_SETMASK, nullptr, &before);
    {
      const stop_signal_watcher watcher("stop-signals-test");
      const on_stop_signal step(note("ran"));
    }
    pthread_sigmask(SIG_SETMASK, nullptr, &after);
    return sigismember(&after, SIGINT) == sigismember(&before, SIGINT) ? 0 : 2;
  });
  const auto status = child.wait_for(30s);
  ASSERT_TRUE(status);
  EXPECT_EQ(status->code(), 0);
  EXPECT_EQ(log(), "");
}
