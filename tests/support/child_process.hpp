#pragma once
// A child process started from the real binary, for tests that cross process boundaries: the
// services/cluster launcher with the child's stdout piped back, so a test waits on its lines
// (with a deadline, never with sleeps). Killed when the handle goes, and when the test process
// dies (ctest's timeout): no test leaves a process behind to load the tests after it. Start one
// from the test's main thread: the kernel's "parent died" is the starting thread's end.

#include "services/cluster/process_launcher.hpp"

#include <string>
#include <vector>

namespace supernode::testing {

using services::cluster::exit_status;

class child_process : public services::cluster::child_process {
public:
  // argv[0] is the program's path.
  explicit child_process(std::vector<std::string> argv)
      : services::cluster::child_process(launch(piped(std::move(argv)))) {}

  // The exit within `timeout`, or nothing while it still runs.
  std::optional<exit_status> wait(std::chrono::milliseconds timeout) { return wait_for(timeout); }

private:
  static services::cluster::launch_spec piped(std::vector<std::string> argv) {
    services::cluster::launch_spec spec;
    spec.argv = std::move(argv);
    spec.stdout_to = services::cluster::output_to::pipe;
    spec.die_with_parent = true;
    return spec;
  }
};

} // namespace supernode::testing
