#pragma once
// A folder for one test's cluster or processes: <tmp>/sn-t<pid>-<n>[-<tag>], a new one per call
// in a test process, removed with the object unless SUPERNODE_KEEP_TEST_RUN_DIR=1 (logs and pid
// files kept for a post-mortem). ctest SIGKILLs a test at its timeout, which then cannot remove
// its folder, and a killed cluster test leaves tens of megabytes of logs there. So each new
// folder first removes the folders of test processes that no longer run: the pid in a folder's
// name says whose it is. (Short names: a cluster's ipc socket paths must fit a sockaddr_un.)

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <signal.h>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace supernode::testing {

inline bool keep_test_run_dirs() {
  const char* keep = std::getenv("SUPERNODE_KEEP_TEST_RUN_DIR");
  return keep && *keep == '1';
}

class test_run_dir {
public:
  explicit test_run_dir(const std::string& tag = "") {
    namespace fs = std::filesystem;
    if (!keep_test_run_dirs()) remove_folders_of_ended_tests();
    path_ = fs::temp_directory_path() / (std::string(prefix) + std::to_string(::getpid()) + "-" +
                                         std::to_string(made_++) + (tag.empty() ? "" : "-" + tag));
    // A folder of this name can only be left by an earlier process with this pid.
    std::error_code ec;
    fs::remove_all(path_, ec);
    if (::mkdir(path_.c_str(), 0700) != 0)
      throw std::system_error(errno, std::generic_category(), "mkdir " + path_.string());
  }
  ~test_run_dir() {
    if (keep_test_run_dirs()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  test_run_dir(const test_run_dir&) = delete;
  test_run_dir& operator=(const test_run_dir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The folder's name, unique on this machine while the test runs: a name for its cluster.
  std::string name() const { return path_.filename().string(); }

private:
  static constexpr const char* prefix = "sn-t";

  static void remove_folders_of_ended_tests() {
    namespace fs = std::filesystem;
    std::error_code ec;
    const std::string_view lead = prefix;
    for (const auto& entry : fs::directory_iterator(fs::temp_directory_path(), ec)) {
      const std::string leaf = entry.path().filename().string();
      if (!leaf.starts_with(lead)) continue;
      // sn-t<pid>-…: the pid, then a dash.
      pid_t pid = 0;
      const char* const last = leaf.data() + leaf.size();
      const auto [end, bad] = std::from_chars(leaf.data() + lead.size(), last, pid);
      if (bad != std::errc{} || pid <= 0 || end == last || *end != '-') continue;
      struct stat st {};
      if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
          st.st_uid != ::getuid())
        continue;
      // Only a pid that names no process marks a folder as left behind (EPERM: someone runs).
      if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
    }
  }

  inline static std::atomic<int> made_{0};
  std::filesystem::path path_;
};

} // namespace supernode::testing
