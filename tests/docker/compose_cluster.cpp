#include "compose_cluster.hpp"

#include "../support/eventually.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <sched.h>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace supernode::testing {

int shell(const std::string& command, std::string* out) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buffer{};
  std::string text;
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe))
    text.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  if (out) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string committed_compose_file(const std::string& name) {
  return std::string(SUPERNODE_SOURCE_DIR) + "/docker/compose/" + name;
}

std::string docker_unavailable() {
  std::string why;
  if (shell(std::string(SUPERNODE_SOURCE_DIR) + "/scripts/dockerd-up.sh 2>&1", &why) == 0)
    return "";
  return why.empty() ? "scripts/dockerd-up.sh failed" : why;
}

std::string test_image() {
  const char* image = std::getenv("SUPERNODE_DOCKER_IMAGE");
  return image && *image ? image : "supernode:latest";
}

std::string build_image() {
  if (shell("docker image inspect '" + test_image() + "' >/dev/null 2>&1") == 0) return "";
  std::string log;
  if (shell(std::string(SUPERNODE_SOURCE_DIR) + "/scripts/docker-build.sh --image '" +
                test_image() + "' 2>&1",
            &log) == 0)
    return "";
  return log.size() > 4000 ? log.substr(log.size() - 4000) : log;
}

compose_cluster::compose_cluster(std::string project, std::string file, std::string models)
    : project_(std::move(project)), file_(std::move(file)), models_(std::move(models)) {}

compose_cluster::~compose_cluster() {
  if (up_) down();
}

std::string compose_cluster::command(const std::string& args) const {
  return "SUPERNODE_MODELS='" + models_ + "' docker-compose --ansi never -p " + project_ + " -f '" +
         file_ + "' " + args;
}

int compose_cluster::compose(const std::string& args, std::string* out) const {
  return shell(command(args) + (out ? " 2>/dev/null" : " >/dev/null 2>&1"), out);
}

std::string compose_cluster::up(const std::string& extra) {
  up_ = true;
  std::string out;
  if (shell(command("up -d " + extra + " 2>&1"), &out) != 0) return out + logs();
  return "";
}

std::vector<std::string> compose_cluster::containers(const std::string& service) const {
  std::string out;
  compose("ps -q " + service, &out);
  std::vector<std::string> ids;
  std::istringstream lines(out);
  for (std::string id; lines >> id;) ids.push_back(id);
  return ids;
}

bool compose_cluster::healthy(std::chrono::seconds timeout) const {
  // Health changes every healthcheck interval (2 s): asking the engine every 500 ms is enough.
  return eventually(
      [&] {
        std::string ids, states;
        compose("ps -q", &ids);
        std::istringstream list(ids);
        std::string all;
        for (std::string id; list >> id;) all += " " + id;
        // Every container that has a healthcheck healthy; the run-dir one has exited 0.
        shell("docker inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}"
              "{{else}}none{{end}}'" +
                  all + " 2>/dev/null",
              &states);
        return !all.empty() && states.find("starting") == std::string::npos &&
               states.find("unhealthy") == std::string::npos &&
               states.find("restarting") == std::string::npos &&
               states.find("created") == std::string::npos;
      },
      timeout, std::chrono::milliseconds(500));
}

int compose_cluster::main_pid(const std::string& container) const {
  std::string out;
  shell("docker inspect -f '{{.State.Pid}}' " + container, &out);
  return std::atoi(out.c_str());
}

int compose_cluster::restarts(const std::string& container) const {
  std::string out;
  shell("docker inspect -f '{{.RestartCount}}' " + container, &out);
  return std::atoi(out.c_str());
}

std::string compose_cluster::logs() const {
  std::string out;
  compose("logs --no-color --tail 30", &out);
  return out;
}

std::string compose_cluster::down() {
  up_ = false;
  compose("down -v --remove-orphans --timeout 30");
  std::string left;
  for (const char* kind : {"ps -a", "volume ls", "network ls"}) {
    std::string out;
    shell(std::string("docker ") + kind +
              " -q --filter label=com.docker.compose.project=" + project_,
          &out);
    if (!out.empty()) left += std::string(kind) + ": " + out;
  }
  return left;
}

void in_network_of(int pid, const std::function<void()>& body) {
  std::exception_ptr failure;
  std::thread thread([&] {
    try {
      const int ns = ::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY);
      if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0)
        throw std::runtime_error("cannot enter the network namespace of pid " +
                                 std::to_string(pid));
      ::close(ns);
      body();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  thread.join();
  if (failure) std::rethrow_exception(failure);
}

} // namespace supernode::testing
