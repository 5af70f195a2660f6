// The process launcher with /bin/sh as the child: output piped, logged or dropped, environment
// and exit codes passed through, deadlines on waits, and no child left behind by a handle.

#include "services/cluster/process_launcher.hpp"
#include "services/cluster/role_launch.hpp"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace cl = supernode::services::cluster;
using namespace std::chrono_literals;

namespace {

cl::launch_spec shell(const std::string& script, cl::output_to out = cl::output_to::pipe) {
  cl::launch_spec spec;
  spec.argv = {"sh", "-c", script};
  spec.program = "/bin/sh";
  spec.stdout_to = out;
  return spec;
}

// A folder of this test's own under the temporary folder, removed afterwards.
class launcher_fixture : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("process-launcher-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

bool pid_exists(pid_t pid) {
  return ::kill(pid, 0) == 0;
}

} // namespace

TEST_F(launcher_fixture, piped_stdout_arrives_line_by_line_then_eof) {
  auto child = cl::child_process::launch(shell("echo one; echo two"));
  EXPECT_EQ(child.read_line(10s), "one");
  EXPECT_EQ(child.read_line(10s), "two");
  EXPECT_EQ(child.read_line(10s), std::nullopt); // EOF
  EXPECT_TRUE(child.wait().success());
  EXPECT_FALSE(child.running());
}

TEST_F(launcher_fixture, wait_for_line_skips_to_the_prefix_and_for_each_line_reads_to_the_end) {
  auto child = cl::child_process::launch(shell("echo a; echo listening x:1; echo b; printf c"));
  EXPECT_EQ(child.wait_for_line("listening ", 10s), "listening x:1");
  std::vector<std::string> rest;
  child.for_each_line([&](const std::string& line) { rest.push_back(line); });
  EXPECT_EQ(rest, (std::vector<std::string>{"b", "c"})); // the last line has no newline
}

TEST_F(launcher_fixture, environment_is_ours_plus_the_specs) {
  ::setenv("LAUNCHER_TEST_KEPT", "kept", 1);
  ::setenv("LAUNCHER_TEST_REPLACED", "old", 1);
  auto spec = shell("echo $LAUNCHER_TEST_KEPT $LAUNCHER_TEST_REPLACED $LAUNCHER_TEST_NEW");
  spec.env = {{"LAUNCHER_TEST_REPLACED", "new"}, {"LAUNCHER_TEST_NEW", "added"}};
  auto child = cl::child_process::launch(spec);
  EXPECT_EQ(child.read_line(10s), "kept new added");
}

TEST_F(launcher_fixture, exit_codes_and_signals_are_reported) {
  auto three = cl::child_process::launch(shell("exit 3", cl::output_to::inherit));
  const auto s = three.wait();
  EXPECT_TRUE(s.exited());
  EXPECT_EQ(s.code(), 3);
  EXPECT_EQ(s.shell_code(), 3);
  EXPECT_FALSE(s.success());

  auto sleeper = cl::child_process::launch(shell("exec sleep 30", cl::output_to::inherit));
  EXPECT_TRUE(sleeper.signal(SIGTERM));
  const auto t = sleeper.wait_for(10s);
  ASSERT_TRUE(t);
  EXPECT_FALSE(t->exited());
  EXPECT_EQ(t->signal(), SIGTERM);
  EXPECT_EQ(t->shell_code(), 128 + SIGTERM);
  EXPECT_FALSE(sleeper.signal(SIGTERM)); // gone
}

TEST_F(launcher_fixture, wait_for_gives_up_at_its_deadline) {
  auto sleeper = cl::child_process::launch(shell("exec sleep 30", cl::output_to::inherit));
  EXPECT_EQ(sleeper.wait_for(50ms), std::nullopt);
  EXPECT_TRUE(sleeper.running());
  EXPECT_EQ(sleeper.kill().signal(), SIGKILL);
}

TEST_F(launcher_fixture, stop_kills_a_child_that_ignores_sigterm) {
  auto stubborn =
      cl::child_process::launch(shell("trap '' TERM; echo armed; while :; do sleep 1; done"));
  ASSERT_EQ(stubborn.read_line(10s), "armed"); // the trap is set
  EXPECT_EQ(stubborn.stop(100ms).signal(), SIGKILL);

  auto polite = cl::child_process::launch(shell("exec sleep 30", cl::output_to::inherit));
  EXPECT_EQ(polite.stop(10s).signal(), SIGTERM);
}

TEST_F(launcher_fixture, a_log_file_takes_stdout_and_stderr) {
  auto spec = shell("echo out; echo err >&2", cl::output_to::file);
  spec.stderr_to = cl::output_to::file;
  spec.log_file = dir_ / "child.log";
  // A log of an earlier run that others could read is truncated and becomes private too.
  { std::ofstream(spec.log_file) << "old run\n"; }
  std::filesystem::permissions(spec.log_file, std::filesystem::perms::all);
  auto child = cl::child_process::launch(spec);
  EXPECT_TRUE(child.wait().success());
  EXPECT_EQ(cl::read_text_file(spec.log_file), "out\nerr\n");
  EXPECT_EQ(std::filesystem::status(spec.log_file).permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST_F(launcher_fixture, stderr_can_share_the_stdout_pipe) {
  auto spec = shell("echo out; echo err >&2; echo end");
  spec.stderr_to = cl::output_to::pipe;
  auto child = cl::child_process::launch(spec);
  std::vector<std::string> lines;
  child.for_each_line([&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(lines, (std::vector<std::string>{"out", "err", "end"}));

  auto alone = shell("true", cl::output_to::inherit);
  alone.stderr_to = cl::output_to::pipe;
  EXPECT_THROW(cl::child_process::launch(alone), std::invalid_argument);
}

TEST_F(launcher_fixture, stdin_from_dev_null_ends_at_once) {
  auto spec = shell("cat; echo done");
  spec.stdin_null = true;
  auto child = cl::child_process::launch(spec);
  EXPECT_EQ(child.read_line(10s), "done");
  EXPECT_TRUE(child.wait().success());
}

TEST_F(launcher_fixture, a_program_that_cannot_run_throws_with_the_reason) {
  cl::launch_spec spec;
  spec.argv = {(dir_ / "no-such-program").string()};
  try {
    cl::child_process::launch(spec);
    FAIL() << "launch did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot execute"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
}

TEST_F(launcher_fixture, a_fork_runs_the_function_and_exits_with_its_result) {
  int touched = 0;
  auto seven = cl::child_process::fork_running([&] {
    touched = 1; // the child's copy
    return 7;
  });
  EXPECT_EQ(seven.wait().code(), 7);
  EXPECT_EQ(touched, 0);
  auto thrower = cl::child_process::fork_running([]() -> int { throw std::runtime_error("no"); });
  EXPECT_EQ(thrower.wait().code(), 1);
}

TEST_F(launcher_fixture, a_dropped_handle_kills_its_child_and_a_released_one_does_not) {
  pid_t killed = 0;
  {
    auto child = cl::child_process::launch(shell("exec sleep 30", cl::output_to::inherit));
    killed = child.pid();
  }
  EXPECT_FALSE(pid_exists(killed)); // killed and reaped, not a zombie

  pid_t kept = 0;
  {
    auto child = cl::child_process::launch(shell("exec sleep 30", cl::output_to::inherit));
    kept = child.release();
    EXPECT_FALSE(child.running());
  }
  EXPECT_TRUE(pid_exists(kept));
  ::kill(kept, SIGKILL);
  EXPECT_EQ(::waitpid(kept, nullptr, 0), kept);
}

TEST_F(launcher_fixture, a_moved_handle_owns_the_child) {
  auto first = cl::child_process::launch(shell("echo moved"));
  cl::child_process second = std::move(first);
  EXPECT_FALSE(first.running());
  EXPECT_EQ(second.read_line(10s), "moved");
  EXPECT_TRUE(second.wait().success());
}

TEST_F(launcher_fixture, wait_until_ready_watches_the_logs) {
  auto start = [&](const std::string& name, const std::string& script) {
    auto spec = shell(script, cl::output_to::file);
    spec.log_file = dir_ / (name + ".log");
    return cl::child_process::launch(spec);
  };
  auto a = start("a", "echo starting; echo ready; exec sleep 30");
  auto b = start("b", "echo ready; exec sleep 30");
  EXPECT_EQ(cl::wait_until_ready({{"a", &a, dir_ / "a.log"}, {"b", &b, dir_ / "b.log"}}, 30s),
            std::nullopt);

  auto broken = start("broken", "echo loading; echo bad config; exit 1");
  const auto failure = cl::wait_until_ready({{"broken", &broken, dir_ / "broken.log"}}, 30s);
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->name, "broken");
  EXPECT_TRUE(failure->exited);
  EXPECT_EQ(failure->log_tail, "loading\nbad config\n");
  EXPECT_NE(failure->describe().find("broken exited during start-up"), std::string::npos);
}

TEST(log_text, lines_are_found_by_their_start) {
  const std::string log = "ready-ish\nlistening a:1\nready\nlistening b:2\n";
  EXPECT_TRUE(cl::has_line_starting(log, "ready"));
  EXPECT_TRUE(cl::has_line_starting("ready\n", "ready"));
  EXPECT_FALSE(cl::has_line_starting("not ready\n", "ready"));
  EXPECT_EQ(cl::lines_starting(log, "listening "),
            (std::vector<std::string>{"listening a:1", "listening b:2"}));
  EXPECT_EQ(cl::last_lines("1\n2\n3\n", 2), "2\n3\n");
  EXPECT_EQ(cl::last_lines("1\n2\n", 5), "1\n2\n");
}

TEST_F(launcher_fixture, a_program_gets_its_three_descriptors_and_no_other) {
  // Another child's pipe and log are open here while this one starts, and this process may
  // hold descriptors it inherited (from the shell or test runner that started it).
  auto other_spec = shell("exec sleep 30");
  other_spec.stderr_to = cl::output_to::file;
  other_spec.log_file = dir_ / "other.log";
  auto other = cl::child_process::launch(other_spec);
  auto spec = shell("ls /proc/self/fd");
  spec.stdin_null = true;
  spec.stderr_to = cl::output_to::null;
  auto child = cl::child_process::launch(spec);
  std::vector<std::string> fds;
  child.for_each_line([&](const std::string& line) { fds.push_back(line); });
  // 0-2, and the folder ls reads.
  EXPECT_EQ(fds, (std::vector<std::string>{"0", "1", "2", "3"}));
}
