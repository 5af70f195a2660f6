#include "run_dir_post_mortem.hpp"
#include "test_run_dir.hpp"

#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using supernode::testing::test_run_dir;

namespace {
// A pid that named a process a moment ago and names none now (until the kernel reuses it).
pid_t ended_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// These tests are about removal, which SUPERNODE_KEEP_TEST_RUN_DIR=1 turns off.
class test_run_dir_removal : public ::testing::Test {
protected:
  void SetUp() override { ::unsetenv("SUPERNODE_KEEP_TEST_RUN_DIR"); }
};
} // namespace

TEST_F(test_run_dir_removal, is_private_to_the_user_and_removed_with_the_object) {
  fs::path path;
  {
    const test_run_dir dir("unit");
    path = dir.path();
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_NE(dir.name().find("-unit"), std::string::npos) << dir.name();
    const test_run_dir second("unit");
    EXPECT_NE(second.path(), path);
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(test_run_dir_removal,
       a_new_one_removes_the_folders_of_ended_tests_and_keeps_the_running_ones) {
  const auto tmp = fs::temp_directory_path();
  const fs::path ended = tmp / ("sn-t" + std::to_string(ended_pid()) + "-7-killed");
  const fs::path running = tmp / ("sn-t" + std::to_string(::getppid()) + "-7-running");
  const fs::path other = tmp / ("sn-tx" + std::to_string(ended_pid()) + "-7");
  for (const auto& p : {ended, running, other}) {
    fs::create_directories(p / "logs");
    std::ofstream(p / "logs" / "a.log") << "left behind";
  }
  const test_run_dir dir;
  EXPECT_FALSE(fs::exists(ended));
  EXPECT_TRUE(fs::exists(running / "logs" / "a.log"));
  EXPECT_TRUE(fs::exists(other / "logs" / "a.log")); // not a test folder's name
  fs::remove_all(running);
  fs::remove_all(other);
}

TEST(run_dir_post_mortem, prints_the_events_and_the_end_of_every_log) {
  const test_run_dir dir;
  {
    std::ofstream events(dir.path() / "events.jsonl");
    events << "{\"event\":\"spawned\",\"process\":\"decode-0\"}\n"
           << "{\"event\":\"hung\",\"process\":\"decode-0\"}\n";
  }
  fs::create_directory(dir.path() / "logs");
  {
    std::ofstream log(dir.path() / "logs" / "decode-0.log");
    for (int i = 1; i <= 100; ++i) log << "line " << i << '\n';
  }
  std::ofstream(dir.path() / "logs" / "gateway-0.log") << "ready gateway-0\n";
  std::ostringstream out;
  supernode::testing::print_run_dir_post_mortem(dir.path(), out);
  const std::string text = out.str();
  EXPECT_NE(text.find("{\"event\":\"hung\",\"process\":\"decode-0\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("decode-0.log (100 lines, the last 60)"), std::string::npos) << text;
  EXPECT_NE(text.find("  line 41\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("  line 40\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gateway-0.log (1 line)\n  ready gateway-0\n"), std::string::npos) << text;
  EXPECT_LT(text.find("decode-0.log"), text.find("gateway-0.log")) << "logs in name order";
}
