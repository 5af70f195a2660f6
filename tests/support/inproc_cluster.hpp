#pragma once
// A cluster file for tests whose instances all live in this process over the inproc plane: a
// cluster name and run_dir of its own per call (so tests in one process never share planes or
// files), fast heartbeats that tolerate a loaded machine (2 s of silence before an instance is
// declared down: none of these tests waits for a failure detector), then the caller's
// [process.*] and serving tables. The run_dir goes with the object.

#include "services/serving/cluster_file.hpp"
#include "test_run_dir.hpp"

#include <filesystem>
#include <string>

namespace supernode::testing {

class inproc_cluster_file {
  test_run_dir folder_; // first: the file's text names it

public:
  services::cluster_file file;

  inproc_cluster_file(const std::string& prefix, const std::string& tables)
      : folder_(prefix),
        file(services::cluster_file::parse(text(folder_, tables), prefix + ".toml")) {}

private:
  static std::string text(const test_run_dir& folder, const std::string& tables) {
    return "[cluster]\nname = \"" + folder.name() + "\"\nrun_dir = \"" + folder.path().string() +
           "\"\nheartbeat_ms = 50\nmissed_heartbeats = 40\n"
           "[planes.local]\nkind = \"inproc\"\n[flows]\ndefault = \"local\"\n" +
           tables;
  }
};

} // namespace supernode::testing
