#pragma once
// A cluster file for tests whose instances all live in this process over the inproc plane: a
// cluster name and run_dir of its own per call (so tests in one process never share planes or
// files), fast heartbeats that tolerate a loaded machine (2 s of silence before an instance is
// declared down: none of these tests waits for a failure detector), then the caller's
// [process.*] and serving tables. The run_dir goes with the object.

#include "services/serving/cluster_file.hpp"

#include <atomic>
#include <filesystem>
#include <string>
#include <unistd.h>

namespace supernode::testing {

struct inproc_cluster_file {
  std::filesystem::path run_dir;
  services::cluster_file file;

  inproc_cluster_file(const std::string& prefix, const std::string& tables)
      : file(services::cluster_file::parse(text(prefix, tables, run_dir), prefix + ".toml")) {}
  ~inproc_cluster_file() {
    std::error_code ignored;
    std::filesystem::remove_all(run_dir, ignored);
  }
  inproc_cluster_file(const inproc_cluster_file&) = delete;
  inproc_cluster_file& operator=(const inproc_cluster_file&) = delete;

private:
  static std::string text(const std::string& prefix, const std::string& tables,
                          std::filesystem::path& run_dir) {
    static std::atomic<int> counter{0};
    const std::string name =
        prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    run_dir = std::filesystem::temp_directory_path() / name;
    return "[cluster]\nname = \"" + name + "\"\nrun_dir = \"" + run_dir.string() +
           "\"\nheartbeat_ms = 50\nmissed_heartbeats = 40\n"
           "[planes.local]\nkind = \"inproc\"\n[flows]\ndefault = \"local\"\n" +
           tables;
  }
};

} // namespace supernode::testing
