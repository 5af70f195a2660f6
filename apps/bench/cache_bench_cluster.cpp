#include "apps/bench/cache_bench_cluster.hpp"

#include "services/cluster/cluster_file.hpp"
#include "services/cluster/process_launcher.hpp"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <stdexcept>
#include <vector>

namespace supernode::apps {

namespace fs = std::filesystem;
namespace cl = services::cluster;

namespace {

// Runs `supernode ARGS...` (this binary); each line it prints on stdout goes to on_line, its
// stderr is ours. Returns its exit status (128 + signal when killed).
int run_self(const std::vector<std::string>& args,
             const std::function<void(const std::string&)>& on_line) {
  auto spec = cl::self_command(args);
  spec.stdout_to = cl::output_to::pipe;
  auto child = cl::child_process::launch(spec);
  child.for_each_line(on_line);
  return child.wait().shell_code();
}

} // namespace

cache_bench_cluster::cache_bench_cluster(const fs::path& run_dir, const std::string& config_text,
                                         const fs::path& model, std::string label)
    : run_dir_(run_dir), model_(model), label_(std::move(label)) {
  fs::remove_all(run_dir_);
  fs::create_directories(run_dir_);
  config_ = run_dir_ / "cluster.toml";
  cl::cluster_file(config_text).write(config_);
}

cache_bench_cluster::~cache_bench_cluster() {
  if (!started_) return;
  // First, so that a signal's `cluster down`, when one is running, is the only one: this waits
  // for it (and the bench ends there).
  down_on_signal_.reset();
  try {
    down();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[%s] cluster down --config %s failed: %s\n", label_.c_str(),
                 config_.c_str(), e.what());
  }
  std::error_code ec;
  if (ok_) {
    fs::remove_all(run_dir_, ec);
  } else {
    fs::remove_all(run_dir_ / "ems", ec); // the SSD tiers; the logs stay for reading
    std::fprintf(stderr, "[%s] logs kept in %s\n", label_.c_str(), (run_dir_ / "logs").c_str());
  }
}

void cache_bench_cluster::print_line(const std::string& line) const {
  std::fprintf(stderr, "[%s] %s\n", label_.c_str(), line.c_str());
}

void cache_bench_cluster::down() const {
  run_self({"cluster", "down", "--config", config_.string()},
           [this](const std::string& line) { print_line(line); });
}

uint16_t cache_bench_cluster::up() {
  started_ = true;
  // ^C or a kill while the cluster is up runs `cluster down` for it before the bench dies.
  down_on_signal_ = std::make_unique<on_stop_signal>([this] { down(); });
  std::optional<uint16_t> port;
  const int status =
      run_self({"cluster", "up", "--config", config_.string(), "--model", model_.string()},
               [&](const std::string& line) {
                 print_line(line);
                 const std::string tag = "listening gateway-0 ";
                 if (line.rfind(tag, 0) == 0) {
                   const auto colon = line.rfind(':');
                   port = static_cast<uint16_t>(std::atoi(line.c_str() + colon + 1));
                 }
               });
  const std::string command = "`supernode cluster up --config " + config_.string() + "`";
  if (status != 0)
    throw std::runtime_error(command + " failed (exit status " + std::to_string(status) +
                             "; its output is above)");
  if (!port || *port == 0)
    throw std::runtime_error(command + " printed no \"listening gateway-0\" line with a port");
  return *port;
}

} // namespace supernode::apps
