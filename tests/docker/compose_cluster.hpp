#pragma once
// A compose cluster of the committed files under docker/compose/, run by the test through
// docker-compose under a project name of its own, and torn down (containers, volumes, the
// network) when it ends. The engine is started by scripts/dockerd-up.sh when none answers; the
// image is built (cached) by scripts/docker-build.sh.

#include <chrono>
#include <functional>
#include <string>

namespace supernode::testing {

// Runs a shell command; its exit status, and its stdout in `out` when given.
int shell(const std::string& command, std::string* out = nullptr);

// A committed file under docker/compose/.
std::string committed_compose_file(const std::string& name);

// Why docker cannot run here ("" when it can): the engine could not be started.
std::string docker_unavailable();
// The image the tests run: $SUPERNODE_DOCKER_IMAGE, or supernode:latest.
std::string test_image();
// Builds the image when the engine lacks it (.ci/run builds it before the tests, so a source
// change is in it); "" or what failed.
std::string build_image();

class compose_cluster {
public:
  // `file`: a compose file; `models`: mounted as the models folder.
  compose_cluster(std::string project, std::string file, std::string models);
  ~compose_cluster();
  compose_cluster(const compose_cluster&) = delete;
  compose_cluster& operator=(const compose_cluster&) = delete;

  // docker-compose ARGS in this project; exit status, stdout in `out`.
  int compose(const std::string& args, std::string* out = nullptr) const;
  // Brings it up detached; "" or the failure with the services' logs.
  std::string up(const std::string& extra = "");
  // Waits until every running service with a healthcheck is healthy and `services` run at
  // least `replicas` containers each; false when `timeout` passes first.
  bool healthy(std::chrono::seconds timeout) const;
  // The containers of a service.
  std::vector<std::string> containers(const std::string& service) const;
  // The host pid of a container's main process.
  int main_pid(const std::string& container) const;
  int restarts(const std::string& container) const;
  std::string logs() const;
  // Down with volumes; "" or what is left (containers, volumes, networks of the project).
  std::string down();

private:
  std::string command(const std::string& args) const; // the docker-compose command line

  std::string project_, file_, models_;
  bool up_ = false;
};

// Runs `body` on a thread inside the network namespace of `pid` (a container's process), so
// 127.0.0.1 is that container's loopback; for a gateway on a bridge network.
void in_network_of(int pid, const std::function<void()>& body);

} // namespace supernode::testing
