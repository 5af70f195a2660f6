#include "services/moe/local_group.hpp"

#include "transport/private_files.hpp"

#include <filesystem>
#include <latch>
#include <stdexcept>
#include <thread>
#include <unistd.h>

namespace supernode::services {

namespace {

// Where the ZeroMQ fabric's ranks bind, one socket each: a folder of this user's only, removed
// when the group ends. The shared-memory fabric needs none (empty path).
class socket_folder {
public:
  socket_folder(bool wanted, const std::string& group) {
    if (!wanted) return;
    path_ = std::filesystem::temp_directory_path() / ("supernode-" + group);
    transport::ensure_private_dir(path_);
  }
  ~socket_folder() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  socket_folder(const socket_folder&) = delete;
  socket_folder& operator=(const socket_folder&) = delete;
  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
};

bool uses_zmq(const local_group_options& o) {
  if (o.fabric == "zmq") return true;
  if (o.fabric == "shm") return false;
  throw std::invalid_argument("local group: unknown fabric '" + o.fabric + "' (shm or zmq)");
}

std::unique_ptr<transport::rank_fabric> make_fabric(const local_group_options& o,
                                                    const std::string& group,
                                                    const socket_folder& sockets, int rank,
                                                    size_t bytes) {
  transport::rank_fabric_options f;
  f.cluster = o.cluster;
  f.group = group;
  f.rank = rank;
  f.ranks = o.ranks;
  f.bytes = bytes;
  f.flags = ep_flag_count;
  f.log = log::logger{group + "-rank" + std::to_string(rank)}; // ranks as threads: no instances
  if (!sockets.path().empty()) {
    for (int r = 0; r < o.ranks; ++r)
      f.addresses.push_back("ipc://" + (sockets.path() / std::to_string(r)).string());
    return transport::make_zmq_rank_fabric(f);
  }
  return transport::make_shm_rank_fabric(f);
}

} // namespace

std::vector<std::string> run_local_group(const local_group_options& options,
                                         std::shared_ptr<const model::model_weights> weights,
                                         const local_rank_body& body) {
  static std::atomic<int> groups{0};
  // Appended piecewise: g++ 12 warns falsely (-Wrestrict) on "literal" + std::string&&.
  std::string group = "g";
  group += std::to_string(::getpid());
  group += "-";
  group += std::to_string(groups++);
  const int ranks = options.ranks;
  const socket_folder sockets(uses_zmq(options), group);
  std::vector<std::string> errors(static_cast<size_t>(ranks));
  std::latch connected(ranks), finished(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      bool up = false, done = false;
      try {
        auto o = options.ep;
        o.rank = r;
        o.ranks = ranks;
        const auto layout = expert_parallel::layout_for(weights->config, weights->prec, o);
        auto fabric = make_fabric(options, group, sockets, r, layout.total_bytes());
        std::string why;
        if (!fabric->connect(
                std::chrono::seconds(30), [] { return false; }, why))
          throw std::runtime_error(why);
        connected.arrive_and_wait();
        up = true;
        expert_parallel ep(weights, *fabric, o);
        body(r, ep, *fabric);
        done = true;
        finished.arrive_and_wait();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      // A rank that failed counts as arrived, or its peers would wait for it forever.
      if (!up) connected.count_down();
      if (!done) finished.count_down();
    });
  for (auto& t : threads) t.join();
  return errors;
}

void serve_peers_until(expert_parallel& ep, const std::atomic<int>& done, int ranks) {
  for (;;) {
    const auto seen = ep.doorbell_value();
    if (ep.peer_waiting()) {
      ep.serve_idle_forward();
      continue;
    }
    if (done >= ranks) return;
    ep.sleep(seen, std::chrono::milliseconds(20)); // `done` changes without a doorbell
  }
}

} // namespace supernode::services
