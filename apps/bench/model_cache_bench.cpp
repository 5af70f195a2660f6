#include "apps/bench/model_cache_bench.hpp"

#include "apps/cli_args.hpp"
#include "services/ems/model_blocks.hpp"
#include "services/ems/model_cache.hpp"
#include "services/ems/object_store.hpp"
#include "services/ems/pool_session.hpp"
#include "services/serving/cluster_file.hpp"
#include "transport/shm_segment.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace supernode::apps {

namespace fs = std::filesystem;
namespace ems = services::ems;

namespace {

using clock_type = std::chrono::steady_clock;

constexpr const char* usage = R"(usage: supernode bench model-cache [options]

The paper's Table 2 (model caching) on this host. N instances - threads of this process, each
with its own object-store reader and, with the pool, its own seat ("loader-<i>") in a generated
cluster - load one model from a folder standing in for an object-storage bucket whose bandwidth
cap all of them share:
  no cache    every instance reads the whole model from the bucket at once (cold start);
  local DRAM  the same cold start, then a warm start: one instance copies the folder it already
              holds (its node's DRAM cache) again; DRAM overhead N x the model;
  EMS         an MP controller and two MP servers (child processes): all instances call the
              model cache at once, one fetches from the bucket and the others read the pool
              (cold start); a new instance then loads the model already in the pool (warm start);
              DRAM overhead 1 x the model;
  switch      one instance serving the model switches to a second model B (the same files under
              another folder name, so other keys): from the bucket, or from the pool with B
              prefetched.
"Loaded" means the model's files, byte-identical, are in the instance's local folder: OBS->DRAM.
The weights are not parsed and nothing moves DRAM->NPU.

  --model DIR       the model folder in the bucket: the bucket is DIR's parent and the model id
                    DIR's name (default models/demo)
  --bandwidth B     the bucket's cap in bytes/s, shared by every reader (default 2.5e9, the
                    paper's)
  --instances N     instances starting the model together (default 8; --quick 4)
  --dram-bytes B    [ems] dram_bytes of each of the 2 MP servers (default: room for 2 models)
  --json FILE       also write the JSON report to FILE
  --quick           4 instances by default, and a small model is fine

Local copies live under the temporary folder and are removed after each scenario; the pool's
processes are stopped (SIGTERM) and its folder removed at the end, also on error or a signal.
)";

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

std::string errno_text() {
  return std::strerror(errno);
}

std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}

// --- Cleanup on a signal -------------------------------------------------------------------
// Local copies of a large model must not pile up under /tmp and the pool's processes must not
// outlive the bench, also when it is interrupted. The stop signals are blocked before any thread
// starts and one watcher thread takes them with sigtimedwait: it stops the children, removes the
// registered folders and the cluster's shared-memory segments, and exits.

struct cleanup_registry {
  std::mutex mutex;
  std::set<pid_t> children;
  std::set<fs::path> paths;
  std::string cluster; // shared-memory segments "supernode.<cluster>.*"
};

cleanup_registry& registry() {
  static cleanup_registry r;
  return r;
}

void register_path(const fs::path& p) {
  std::lock_guard lock(registry().mutex);
  registry().paths.insert(p);
}

void unregister_path(const fs::path& p) {
  std::lock_guard lock(registry().mutex);
  registry().paths.erase(p);
}

void remove_segments(const std::string& cluster) {
  if (cluster.empty()) return;
  for (const auto& name : transport::list_segments(cluster)) ::shm_unlink(("/" + name).c_str());
}

class signal_cleanup {
public:
  signal_cleanup() {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set_, s);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    thread_ = std::thread([this] { watch(); });
  }
  ~signal_cleanup() {
    stop_ = true;
    thread_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  signal_cleanup(const signal_cleanup&) = delete;
  signal_cleanup& operator=(const signal_cleanup&) = delete;

private:
  void watch() {
    const timespec tick{0, 100'000'000};
    while (!stop_) {
      const int sig = ::sigtimedwait(&set_, nullptr, &tick);
      if (sig > 0) clean_up_and_exit(sig);
    }
  }

  [[noreturn]] static void clean_up_and_exit(int sig) {
    std::fprintf(stderr, "bench model-cache: signal %d: stopping the pool and removing files\n",
                 sig);
    std::set<pid_t> children;
    std::set<fs::path> paths;
    std::string cluster;
    {
      std::lock_guard lock(registry().mutex);
      children = registry().children;
      paths = registry().paths;
      cluster = registry().cluster;
    }
    for (pid_t pid : children) ::kill(pid, SIGTERM);
    const auto deadline = clock_type::now() + std::chrono::seconds(10);
    for (pid_t pid : children) {
      while (::waitpid(pid, nullptr, WNOHANG) == 0 && clock_type::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (::kill(pid, 0) == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
    // Loader threads may still be writing: a second pass takes what they created meanwhile.
    for (int pass = 0; pass < 3; ++pass)
      for (const auto& p : paths) {
        std::error_code ec;
        fs::remove_all(p, ec);
      }
    remove_segments(cluster);
    std::_Exit(128 + sig);
  }

  sigset_t set_{}, old_{};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A folder removed on destruction (and by the signal watcher).
class scoped_dir {
public:
  explicit scoped_dir(fs::path p) : path_(std::move(p)) {
    register_path(path_);
    std::error_code ec;
    fs::create_directories(path_, ec);
    if (ec)
      throw std::runtime_error("bench model-cache: cannot create " + path_.string() + ": " +
                               ec.message());
  }
  ~scoped_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) // gone: the signal watcher took it
      std::fprintf(stderr, "bench model-cache: cannot remove %s: %s\n", path_.c_str(),
                   ec.message().c_str());
    unregister_path(path_);
  }
  scoped_dir(const scoped_dir&) = delete;
  scoped_dir& operator=(const scoped_dir&) = delete;
  const fs::path& path() const { return path_; }

private:
  fs::path path_;
};

// --- The pool's processes --------------------------------------------------------------------

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string tail(const std::string& text, size_t lines) {
  size_t pos = text.size();
  for (size_t n = 0; n <= lines && pos > 0; ++n) pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

// `supernode role PROCESS --config F --id N` from this binary, stdout and stderr into a log file
// (no pipe a chatty child could fill). Stopped with SIGTERM on destruction.
class role_process {
public:
  role_process(const std::string& process, int id, const fs::path& config, fs::path log)
      : name_(process + " " + std::to_string(id)), log_(std::move(log)) {
    std::vector<std::string> argv = {"supernode",     "role", process,           "--config",
                                     config.string(), "--id", std::to_string(id)};
    std::vector<char*> ptrs;
    for (auto& a : argv) ptrs.push_back(a.data());
    ptrs.push_back(nullptr);
    const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      throw std::runtime_error("bench model-cache: cannot create " + log_.string() + ": " +
                               errno_text());
    sigset_t none;
    sigemptyset(&none);
    {
      // Registered before the watcher could miss it.
      std::lock_guard lock(registry().mutex);
      pid_ = ::fork();
      if (pid_ > 0) registry().children.insert(pid_);
    }
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec: the parent has threads.
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      const int null = ::open("/dev/null", O_RDONLY);
      if (null >= 0) ::dup2(null, STDIN_FILENO);
      ::sigprocmask(SIG_SETMASK, &none, nullptr); // the bench blocks the stop signals
      ::execv("/proc/self/exe", ptrs.data());
      ::_exit(127);
    }
    ::close(fd);
    if (pid_ < 0) throw std::runtime_error("bench model-cache: fork of " + name_ + " failed");
  }
  ~role_process() {
    terminate();
    wait_exit(std::chrono::seconds(15));
  }
  role_process(const role_process&) = delete;
  role_process& operator=(const role_process&) = delete;

  const std::string& name() const { return name_; }

  // Until the log holds the "ready" line; throws with the log's tail when the process exits
  // first or does not get there in time.
  void wait_ready(std::chrono::seconds timeout) {
    const auto deadline = clock_type::now() + timeout;
    for (;;) {
      const auto log = read_text(log_);
      if (log.rfind("ready", 0) == 0 || log.find("\nready") != std::string::npos) return;
      const bool exited = reap(false);
      if (exited || clock_type::now() > deadline)
        throw std::runtime_error("bench model-cache: " + name_ +
                                 (exited ? " exited during start-up" : " did not get ready") +
                                 "; its log " + log_.string() + " ends with:\n" + tail(log, 15));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  void terminate() {
    if (!reaped_) ::kill(pid_, SIGTERM);
  }

  // Waits for the exit, SIGKILL after `grace`.
  void wait_exit(std::chrono::seconds grace) {
    const auto deadline = clock_type::now() + grace;
    while (!reap(false) && clock_type::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!reaped_) {
      std::fprintf(stderr, "bench model-cache: %s ignored SIGTERM for %lld s: killing it\n",
                   name_.c_str(), static_cast<long long>(grace.count()));
      ::kill(pid_, SIGKILL);
      reap(true);
    }
  }

private:
  bool reap(bool block) {
    if (reaped_) return true;
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) { // ECHILD: the signal watcher reaped it
      reaped_ = true;
      std::lock_guard lock(registry().mutex);
      registry().children.erase(pid_);
    }
    return reaped_;
  }

  std::string name_;
  fs::path log_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// The generated cluster: planes, the pool's processes and the names the loader threads take.
struct cluster_files {
  std::string name;
  fs::path run_dir, config_file;
  transport::cluster_config cluster;
  ems::ems_config ems;
};

cluster_files write_cluster(const fs::path& work, int loaders, uint64_t dram_bytes,
                            uint64_t ssd_bytes) {
  cluster_files c;
  c.name = "model-cache-" + std::to_string(::getpid());
  c.run_dir = work / "run";
  c.config_file = work / "cluster.toml";
  fs::create_directories(c.run_dir / "logs");
  std::ofstream out(c.config_file);
  out << "# Written by `supernode bench model-cache`.\n"
      << "[cluster]\nname = \"" << c.name << "\"\nrun_dir = \"" << c.run_dir.string()
      << "\"\nheartbeat_ms = 100\nmissed_heartbeats = 20\n\n"
      << "[planes.ub]\nkind = \"shm\"\n[planes.vpc]\nkind = \"zmq\"\ntransport = \"ipc\"\n\n"
      << "[flows]\ndefault = \"vpc\"\nems = \"ub\"\n\n"
      << "[process.ems_controller]\nroles = [\"mp_controller\"]\nthreads = 1\n\n"
      << "[process.ems]\nroles = [\"mp_server\"]\ncount = 2\nthreads = 1\n\n"
      << "# Never started as roles: the bench's loader threads take these instance names.\n"
      << "[process.loader]\nroles = [\"loader\"]\ncount = " << loaders << "\n\n"
      << "[ems]\ndram_bytes = " << dram_bytes << "\nssd_bytes = " << ssd_bytes
      << "\nread_path = \"ub\"\ntimeout_ms = 60000\n";
  out.close();
  if (!out) throw std::runtime_error("bench model-cache: cannot write " + c.config_file.string());
  auto file = services::cluster_file::load(c.config_file);
  c.cluster = std::move(file.cluster);
  c.ems = std::move(file.serving.ems);
  return c;
}

// Before timing anything: the controller and both servers answer this session (a short timeout
// per ask, so a server still starting costs a retry, not the full [ems] timeout_ms).
void await_pool_answers(ems::pool_session& session, const cluster_files& c) {
  auto config = c.ems;
  config.timeout_ms = 500;
  ems::ems_client probe(session.endpoint(), config);
  const auto deadline = clock_type::now() + std::chrono::seconds(30);
  for (;;) {
    if (probe.refresh_ring() && probe.servers().size() == 2) {
      const auto failed = probe.stats().failed_calls;
      probe.list("bench-probe"); // one call to each server
      if (probe.stats().failed_calls == failed) return;
    }
    if (clock_type::now() > deadline)
      throw std::runtime_error("the MP controller and both MP servers did not all answer within "
                               "30 s (logs in " +
                               (c.run_dir / "logs").string() + ")");
    std::this_thread::sleep_for(c.cluster.heartbeat_interval);
  }
}

// MP controller and two MP servers, started and ready, plus one session of the bench's own
// ("the operator") that waits until the ring holds both servers, prefetches and looks.
class pool_cluster {
public:
  // A failure part way stops what started (the members' destructors).
  pool_cluster(const cluster_files& c, const std::string& operator_name) {
    {
      std::lock_guard lock(registry().mutex);
      registry().cluster = c.name;
    }
    const auto logs = c.run_dir / "logs";
    children_.push_back(std::make_unique<role_process>("ems_controller", 0, c.config_file,
                                                       logs / "ems_controller-0.log"));
    children_.back()->wait_ready(std::chrono::seconds(60));
    for (int i = 0; i < 2; ++i) {
      children_.push_back(std::make_unique<role_process>(
          "ems", i, c.config_file, logs / ("ems-" + std::to_string(i) + ".log")));
      children_.back()->wait_ready(std::chrono::seconds(60));
    }
    session_ = std::make_unique<ems::pool_session>(c.cluster, operator_name,
                                                   transport::new_incarnation(), c.ems);
    try {
      await_pool_answers(*session_, c);
    } catch (const std::exception& e) {
      throw std::runtime_error("bench model-cache: " + operator_name + ": " + e.what());
    }
    session_->client().refresh_ring(); // subscribes to the controller's pushes
  }
  ~pool_cluster() {
    session_.reset();
    // All at once, then wait for each.
    for (auto it = children_.rbegin(); it != children_.rend(); ++it) (*it)->terminate();
    for (auto it = children_.rbegin(); it != children_.rend(); ++it)
      (*it)->wait_exit(std::chrono::seconds(15));
    children_.clear();
  }
  pool_cluster(const pool_cluster&) = delete;
  pool_cluster& operator=(const pool_cluster&) = delete;

  ems::ems_client& client() { return session_->client(); }

private:
  std::vector<std::unique_ptr<role_process>> children_;
  std::unique_ptr<ems::pool_session> session_;
};

// --- Instances -------------------------------------------------------------------------------

// The pool of an instance that has none: load_from_object_store never asks it.
class no_pool : public ems::pool_client {
public:
  std::vector<ems::pool_put_outcome> put(const std::string&,
                                         std::span<const ems::pool_put>) override {
    throw std::runtime_error("no pool");
  }
  ems::pool_get_outcome get(const std::string&, std::span<const std::string>) override {
    throw std::runtime_error("no pool");
  }
  std::vector<bool> exists(const std::string&, std::span<const std::string> keys) override {
    return std::vector<bool>(keys.size(), false);
  }
  size_t remove(const std::string&, std::span<const std::string>) override { return 0; }
  std::vector<std::string> list(const std::string&) override { return {}; }
  ems::model_claim claim_model(const std::string&) override { throw std::runtime_error("no pool"); }
  void register_model(const std::string&, const std::string&, std::span<const std::byte>,
                      std::span<const std::string>, uint64_t, const std::string&) override {}
};

struct bench_env {
  fs::path bucket;       // the object-store folder
  std::string model_id;  // model A: a folder of the bucket
  std::string switch_id; // model B
  double bandwidth = 0;
  const cluster_files* cluster = nullptr; // null until the pool runs
};

// What one instance process would hold: its reader of the bucket (the cap is the bucket's, so
// shared with every other reader), its seat in the cluster when there is a pool, its cache.
struct instance {
  std::unique_ptr<ems::object_store> bucket;
  no_pool none;
  std::unique_ptr<ems::pool_session> session;
  std::unique_ptr<ems::model_cache> cache;

  instance(const bench_env& env, const std::string& name, bool with_pool) {
    bucket = std::make_unique<ems::object_store>(env.bucket, env.bandwidth);
    ems::model_cache_options o;
    ems::pool_client* pool = &none;
    if (with_pool) {
      const auto& c = *env.cluster;
      session =
          std::make_unique<ems::pool_session>(c.cluster, name, transport::new_incarnation(), c.ems);
      await_pool_answers(*session, c);
      if (!session->client().wait_for_servers(std::chrono::seconds(30)))
        throw std::runtime_error("no MP server in the ring after 30 s");
      pool = &session->client();
      o.ns = c.ems.model_namespace;
      o.block_bytes = c.ems.model_block_bytes;
    }
    cache = std::make_unique<ems::model_cache>(*pool, *bucket, o);
  }
};

struct load_result {
  std::string name;
  double seconds = 0;
  fs::path dir; // the loaded copy
  ems::model_cache_stats cache;
  ems::object_store_stats bucket;
  std::string error;
};

using load_fn = std::function<fs::path(instance&, const fs::path& local_dir)>;

// Instances `names` on threads: each sets up (and runs `before`, both untimed), then all start
// `load` at the same instant; each one's time runs from that instant to the end of its load.
std::vector<load_result> load_together(const bench_env& env, const std::vector<std::string>& names,
                                       bool with_pool, const fs::path& local_root,
                                       const load_fn& load, const load_fn& before = {}) {
  const size_t n = names.size();
  std::vector<load_result> results(n);
  clock_type::time_point start;
  std::barrier sync(static_cast<std::ptrdiff_t>(n),
                    [&start]() noexcept { start = clock_type::now(); });
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      auto& r = results[i];
      r.name = names[i];
      const auto local = local_root / names[i];
      std::unique_ptr<instance> in;
      try {
        in = std::make_unique<instance>(env, names[i], with_pool);
        if (before) before(*in, local);
      } catch (const std::exception& e) {
        r.error = names[i] + ": " + e.what();
        in.reset();
      }
      sync.arrive_and_wait();
      if (!in) return;
      try {
        const auto bucket_before = in->bucket->stats();
        const auto cache_before = in->cache->stats();
        r.dir = load(*in, local);
        r.seconds = seconds_since(start);
        r.cache = in->cache->stats();
        r.cache.bytes_from_pool -= cache_before.bytes_from_pool;
        r.cache.bytes_from_object_store -= cache_before.bytes_from_object_store;
        r.cache.fallback_blocks -= cache_before.fallback_blocks;
        r.cache.pool_failures -= cache_before.pool_failures;
        r.cache.fetches -= cache_before.fetches;
        r.bucket = in->bucket->stats();
        r.bucket.bytes_read -= bucket_before.bytes_read;
        r.bucket.metadata_bytes -= bucket_before.metadata_bytes;
        std::fprintf(stderr, "  %s: %.2f s (bucket %s, pool %s)\n", names[i].c_str(), r.seconds,
                     gb(static_cast<double>(r.bucket.bytes_read)).c_str(),
                     gb(static_cast<double>(r.cache.bytes_from_pool)).c_str());
      } catch (const std::exception& e) {
        r.error = names[i] + ": " + e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& r : results)
    if (!r.error.empty()) throw std::runtime_error("bench model-cache: " + r.error);
  return results;
}

// The bucket folder's files (name -> size), directly in it.
std::map<std::string, uint64_t> files_of(const fs::path& dir) {
  std::map<std::string, uint64_t> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().filename().string()] = e.file_size();
  return out;
}

// The copy holds exactly the bucket folder's files and sizes; with `bytes`, the same bytes.
void verify_copy(const fs::path& original, const fs::path& copy, bool bytes) {
  const auto want = files_of(original);
  if (files_of(copy) != want)
    throw std::runtime_error("bench model-cache: " + copy.string() +
                             " does not hold the files of " + original.string());
  if (!bytes) return;
  std::vector<char> a(8 << 20), b(8 << 20);
  for (const auto& [name, size] : want) {
    std::ifstream fa(original / name, std::ios::binary), fb(copy / name, std::ios::binary);
    for (uint64_t off = 0; off < size;) {
      const auto n = static_cast<std::streamsize>(std::min<uint64_t>(a.size(), size - off));
      fa.read(a.data(), n);
      fb.read(b.data(), n);
      if (!fa || !fb || std::memcmp(a.data(), b.data(), static_cast<size_t>(n)) != 0)
        throw std::runtime_error("bench model-cache: " + (copy / name).string() + " differs from " +
                                 (original / name).string() + " in the " + std::to_string(n) +
                                 " bytes from offset " + std::to_string(off));
      off += static_cast<uint64_t>(n);
    }
  }
}

void verify_all(const fs::path& original, const std::vector<load_result>& results) {
  for (size_t i = 0; i < results.size(); ++i) verify_copy(original, results[i].dir, i == 0);
}

// Model B: the files of A under another folder name (so another model id and other keys), as
// hard links; copies when the file system refuses links.
fs::path make_switch_model(const fs::path& a, const fs::path& b) {
  fs::create_directories(b);
  bool linked = true;
  for (const auto& [name, size] : files_of(a)) {
    std::error_code ec;
    if (linked) fs::create_hard_link(a / name, b / name, ec);
    if (!linked || ec) {
      linked = false;
      fs::copy_file(a / name, b / name, fs::copy_options::overwrite_existing);
    }
  }
  std::fprintf(stderr, "bench model-cache: model B = %s (%s %s)\n", b.c_str(),
               linked ? "hard links to" : "a copy of", a.c_str());
  return b;
}

// A plain copy of a folder: the warm start from a node's own DRAM cache.
void copy_folder(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& [name, size] : files_of(from))
    fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
}

struct summary {
  double last = 0, mean = 0;
  uint64_t bucket_bytes = 0, bucket_metadata_bytes = 0, pool_bytes = 0, fetches = 0;
  uint64_t fallback_blocks = 0, pool_failures = 0;
  std::vector<double> per_instance;
};

summary summarize(const std::vector<load_result>& results) {
  summary s;
  for (const auto& r : results) {
    s.last = std::max(s.last, r.seconds);
    s.mean += r.seconds / static_cast<double>(results.size());
    s.bucket_bytes += r.bucket.bytes_read;
    s.bucket_metadata_bytes += r.bucket.metadata_bytes;
    s.pool_bytes += r.cache.bytes_from_pool;
    s.fetches += r.cache.fetches;
    s.fallback_blocks += r.cache.fallback_blocks;
    s.pool_failures += r.cache.pool_failures;
    s.per_instance.push_back(r.seconds);
  }
  return s;
}

nlohmann::json to_json(const summary& s, bool with_pool) {
  nlohmann::json j;
  j["cold_start_s"] = s.last;
  j["cold_start_mean_s"] = s.mean;
  j["per_instance_s"] = s.per_instance;
  j["bucket_bytes_read"] = s.bucket_bytes;
  j["bucket_metadata_bytes"] = s.bucket_metadata_bytes;
  if (with_pool) {
    j["pool_bytes_read"] = s.pool_bytes;
    j["fetches_from_bucket"] = s.fetches;
    j["fallback_blocks"] = s.fallback_blocks;
    j["pool_failures"] = s.pool_failures;
  }
  return j;
}

// Bytes of the model's blocks the pool holds (every server's keys of the namespace), and how
// many of its blocks are there.
std::pair<uint64_t, size_t> pool_holds(ems::ems_client& client, const std::string& ns,
                                       const ems::model_manifest& m) {
  const auto keys = client.list(ns);
  const std::set<std::string> have(keys.begin(), keys.end());
  uint64_t bytes = 0;
  size_t blocks = 0;
  for (const auto& f : m.files)
    for (const auto& b : f.blocks)
      if (have.count(b.key)) {
        bytes += b.length;
        ++blocks;
      }
  return {bytes, blocks};
}

void warn_if_degraded(const char* what, const summary& s) {
  if (s.fallback_blocks > 0 || s.pool_failures > 0)
    std::fprintf(stderr,
                 "bench model-cache: warning: %s: %llu blocks fell back to the bucket, %llu loads "
                 "gave up on the pool (see the MP servers' logs)\n",
                 what, static_cast<unsigned long long>(s.fallback_blocks),
                 static_cast<unsigned long long>(s.pool_failures));
}

uint64_t round_up_mib(double bytes) {
  const double mib = 1 << 20;
  return static_cast<uint64_t>(std::ceil(bytes / mib)) << 20;
}

} // namespace

int run_model_cache_bench(cli_args& args) {
  if (args.take_flag("--help")) {
    std::fputs(usage, stdout);
    return 0;
  }
  const bool quick = args.take_flag("--quick");
  const auto model_arg = args.take_or("--model", "models/demo");
  const double bandwidth = args.take_double("--bandwidth", 2.5e9, 1e3, 1e13);
  const int n = static_cast<int>(args.take_int("--instances", quick ? 4 : 8, 1, 64));
  const auto dram_arg = args.take_int("--dram-bytes", 0, 0, int64_t{1} << 40);
  const auto json_file = args.take("--json");
  args.expect_consumed("bench model-cache");

  std::error_code ec;
  const fs::path model_dir = fs::canonical(model_arg, ec);
  if (ec || !fs::is_directory(model_dir))
    throw usage_error("--model: no model folder at " + model_arg +
                      (model_arg == "models/demo"
                           ? " (pass --model DIR: a model folder, e.g. one made by `supernode "
                             "model make --preset tiny --out DIR`)"
                           : ""));
  const std::string id = model_dir.filename().string();
  if (id.find('@') != std::string::npos)
    throw usage_error("--model: the folder name " + id + " (the model id) must not hold '@'");
  const auto files = files_of(model_dir);
  const uint64_t model_bytes =
      std::accumulate(files.begin(), files.end(), uint64_t{0},
                      [](uint64_t s, const auto& f) { return s + f.second; });
  if (files.empty()) throw usage_error("--model: no files in " + model_dir.string());
  if (!quick && model_bytes < (100ull << 20))
    std::fprintf(stderr,
                 "bench model-cache: note: the model is small (%s): fixed costs weigh "
                 "more than the bucket's cap\n",
                 gb(static_cast<double>(model_bytes)).c_str());

  // Room for models A and B in the pool's DRAM (the switch reads B from DRAM, A stays), with
  // slack for the ring's uneven split; the SSD tier (write-through) for every instance's model.
  const double watermark = ems::ems_config{}.dram_high_watermark;
  const uint64_t dram_bytes =
      dram_arg > 0
          ? static_cast<uint64_t>(dram_arg)
          : std::max<uint64_t>(64ull << 20, round_up_mib(2.0 * static_cast<double>(model_bytes) *
                                                         1.3 / 2 / watermark));
  const uint64_t ssd_bytes = std::max<uint64_t>(
      256ull << 20, round_up_mib((n + 2) * static_cast<double>(model_bytes) * 1.3 / 2));

  signal_cleanup watcher; // before any thread: the threads inherit the blocked signals
  const scoped_dir work(fs::temp_directory_path() /
                        ("supernode-model-cache-" + std::to_string(::getpid())));
  const std::string switch_id = id + "-switch-" + std::to_string(::getpid());
  const scoped_dir switch_dir(model_dir.parent_path() / switch_id);
  make_switch_model(model_dir, switch_dir.path());

  bench_env env;
  env.bucket = model_dir.parent_path();
  env.model_id = id;
  env.switch_id = switch_id;
  env.bandwidth = bandwidth;
  // Instance names: loader-0..n-1 start together, loader-n is the warm start, loader-n+1
  // switches, loader-n+2 is the bench's own seat (waits for the ring, prefetches, looks).
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back("loader-" + std::to_string(i));
  const std::string warm_name = "loader-" + std::to_string(n);
  const std::string switch_name = "loader-" + std::to_string(n + 1);
  const std::string operator_name = "loader-" + std::to_string(n + 2);
  const auto cluster = write_cluster(work.path(), n + 3, dram_bytes, ssd_bytes);

  std::fprintf(stderr,
               "bench model-cache: model %s (%s, %zu files) in bucket %s at %.3g B/s, %d "
               "instances; loaded = files in a local folder (OBS->DRAM; weights not parsed, no "
               "DRAM->NPU)\n",
               id.c_str(), gb(static_cast<double>(model_bytes)).c_str(), files.size(),
               env.bucket.c_str(), bandwidth, n);

  const auto load_a = [&](instance& in, const fs::path& local) {
    return in.cache->load_from_object_store(id, id, local);
  };

  // 1. No cache, cold: every instance reads the whole model from the bucket.
  std::fprintf(stderr,
               "bench model-cache: [1/4] no cache: %d instances read %s from the bucket "
               "at once\n",
               n, id.c_str());
  summary no_cache;
  double local_warm = 0;
  {
    const scoped_dir local(work.path() / "no-cache");
    const auto r = load_together(env, names, false, local.path(), load_a);
    verify_all(model_dir, r);
    no_cache = summarize(r);

    // 2. Local DRAM: the same cold start; warm = the instance copies the folder it holds again.
    std::fprintf(stderr,
                 "bench model-cache: [2/4] local DRAM warm start: %s copies its own "
                 "copy\n",
                 names[0].c_str());
    for (size_t i = 1; i < r.size(); ++i) fs::remove_all(r[i].dir);
    const auto start = clock_type::now();
    copy_folder(r[0].dir, local.path() / "warm");
    local_warm = seconds_since(start);
    verify_copy(model_dir, local.path() / "warm", false);
    std::fprintf(stderr, "  %s: %.2f s\n", names[0].c_str(), local_warm);
  }

  // 4a. Switch without a cache: an instance serving A loads B from the bucket and drops A.
  std::fprintf(stderr, "bench model-cache: [4/4, part 1] switch A->B without a cache\n");
  summary switch_no_cache;
  {
    const scoped_dir local(work.path() / "switch-no-cache");
    const auto r = load_together(
        env, {switch_name}, false, local.path(),
        [&](instance& in, const fs::path& dir) {
          auto b = in.cache->load_from_object_store(switch_id, switch_id, dir);
          fs::remove_all(dir / "a");
          return b;
        },
        [&](instance& in, const fs::path& dir) {
          return in.cache->load_from_object_store(id, id, dir / "a");
        });
    verify_copy(switch_dir.path(), r[0].dir, true);
    switch_no_cache = summarize(r);
  }

  // 3. EMS: the pool starts empty; all instances call the model cache at once.
  std::fprintf(stderr,
               "bench model-cache: starting the pool: MP controller + 2 MP servers, %s DRAM and "
               "%s SSD each (cluster %s)\n",
               gb(static_cast<double>(dram_bytes)).c_str(),
               gb(static_cast<double>(ssd_bytes)).c_str(), cluster.config_file.c_str());
  summary ems_cold, ems_warm, switch_ems;
  uint64_t pool_bytes_a = 0, pool_bytes_ab = 0;
  bool pool_complete_a = false, pool_holds_both = false;
  double prefetch_b = 0;
  {
    pool_cluster pool(cluster, operator_name);
    env.cluster = &cluster;
    const auto load_ems = [&](instance& in, const fs::path& local) {
      return in.cache->load(id, id, local);
    };
    ems::object_store unthrottled(env.bucket, 0);
    const auto manifest_a =
        ems::plan_model_blocks(unthrottled, id, id, cluster.ems.model_block_bytes);
    const auto manifest_b =
        ems::plan_model_blocks(unthrottled, switch_id, switch_id, cluster.ems.model_block_bytes);
    const auto& ns = cluster.ems.model_namespace;
    {
      std::fprintf(stderr,
                   "bench model-cache: [3/4] EMS cold start: %d instances load %s through the "
                   "model cache at once\n",
                   n, id.c_str());
      const scoped_dir local(work.path() / "ems-cold");
      const auto r = load_together(env, names, true, local.path(), load_ems);
      verify_all(model_dir, r);
      ems_cold = summarize(r);
      warn_if_degraded("EMS cold start", ems_cold);
    }
    const auto [bytes_a, blocks_a] = pool_holds(pool.client(), ns, manifest_a);
    pool_bytes_a = bytes_a;
    pool_complete_a = blocks_a == manifest_a.block_count();
    {
      std::fprintf(stderr, "bench model-cache: [3/4] EMS warm start: %s loads %s from the pool\n",
                   warm_name.c_str(), id.c_str());
      const scoped_dir local(work.path() / "ems-warm");
      const auto r = load_together(env, {warm_name}, true, local.path(), load_ems);
      verify_copy(model_dir, r[0].dir, true);
      ems_warm = summarize(r);
      warn_if_degraded("EMS warm start", ems_warm);
    }
    {
      std::fprintf(stderr, "bench model-cache: [4/4, part 2] switch A->B with B prefetched into "
                           "the pool\n");
      {
        ems::object_store bucket(env.bucket, bandwidth);
        ems::model_cache_options o;
        o.ns = ns;
        o.block_bytes = cluster.ems.model_block_bytes;
        ems::model_cache prefetcher(pool.client(), bucket, o);
        const auto start = clock_type::now();
        const auto p = prefetcher.prefetch(switch_id, switch_id);
        if (!p.failure.empty())
          throw std::runtime_error("bench model-cache: prefetch of model B " + switch_id +
                                   " failed: " + p.failure);
        prefetch_b = seconds_since(start);
        std::fprintf(stderr, "  prefetch of B (bucket -> pool): %.2f s\n", prefetch_b);
      }
      const auto [bytes_b, blocks_b] = pool_holds(pool.client(), ns, manifest_b);
      const auto [bytes_a2, blocks_a2] = pool_holds(pool.client(), ns, manifest_a);
      pool_bytes_ab = bytes_a2 + bytes_b;
      pool_holds_both =
          blocks_b == manifest_b.block_count() && blocks_a2 == manifest_a.block_count();
      const scoped_dir local(work.path() / "switch-ems");
      const auto r = load_together(
          env, {switch_name}, true, local.path(),
          [&](instance& in, const fs::path& dir) {
            auto b = in.cache->load(switch_id, switch_id, dir);
            fs::remove_all(dir / "a");
            return b;
          },
          [&](instance& in, const fs::path& dir) { return in.cache->load(id, id, dir / "a"); });
      verify_copy(switch_dir.path(), r[0].dir, true);
      switch_ems = summarize(r);
      warn_if_degraded("EMS switch", switch_ems);
    }
  }
  transport::cleanup_stale_segments(cluster.name); // anything a crashed process left
  std::fprintf(stderr, "bench model-cache: pool stopped\n");

  // The report.
  const double m = static_cast<double>(model_bytes);
  nlohmann::json out;
  out["what"] = "cold/warm start = OBS->DRAM: the model's files byte-identical in the instance's "
                "local folder; weights not parsed, no DRAM->NPU";
  out["model"] = {
      {"dir", model_dir.string()}, {"id", id}, {"bytes", model_bytes}, {"files", files.size()}};
  out["bucket"] = {{"folder", env.bucket.string()},
                   {"bandwidth_bytes_per_s", bandwidth},
                   {"one_model_s", m / bandwidth},
                   {"n_models_s", m * n / bandwidth}};
  out["instances"] = n;
  out["pool"] = {{"servers", 2},
                 {"dram_bytes_per_server", dram_bytes},
                 {"ssd_bytes_per_server", ssd_bytes},
                 {"read_path", "ub"}};

  auto& nc = out["no_cache"] = to_json(no_cache, false);
  nc["warm_start_s"] = nullptr;
  nc["dram_overhead_bytes"] = 0;

  auto& ld = out["local_dram"];
  ld["cold_start_s"] = no_cache.last; // an empty local cache: the no-cache run itself
  ld["cold_start_mean_s"] = no_cache.mean;
  ld["cold_start_note"] = "the no-cache run: on a cold start the local cache is empty";
  ld["bucket_bytes_read"] = no_cache.bucket_bytes;
  ld["warm_start_s"] = local_warm;
  ld["dram_overhead_bytes"] = static_cast<uint64_t>(n) * model_bytes;
  ld["dram_overhead_models"] = n;

  auto& e = out["ems"] = to_json(ems_cold, true);
  e["warm_start_s"] = ems_warm.last;
  e["warm_pool_bytes_read"] = ems_warm.pool_bytes;
  e["warm_bucket_bytes_read"] = ems_warm.bucket_bytes;
  e["dram_overhead_bytes"] = pool_bytes_a; // the model's blocks the pool holds, listed
  e["dram_overhead_models"] = static_cast<double>(pool_bytes_a) / m;
  e["pool_holds_whole_model"] = pool_complete_a;

  // Switch hit rates by the paper's definitions: the instances serve N different models and a
  // switch goes to any of them. A node's DRAM holds only its own model (a hit 1 time in N); the
  // pool holds all of them (here: A and B at once, both whole, and SSD room for N + 2 models).
  const double local_hit = 1.0 / n;
  const double ems_hit = pool_holds_both ? 1.0 : 0.0;
  auto& s = out["switch"];
  s["no_cache_s"] = switch_no_cache.last;
  s["no_cache_bucket_bytes_read"] = switch_no_cache.bucket_bytes;
  s["ems_s"] = switch_ems.last;
  s["ems_pool_bytes_read"] = switch_ems.pool_bytes;
  s["ems_bucket_bytes_read"] = switch_ems.bucket_bytes;
  s["prefetch_b_s"] = prefetch_b; // bucket -> pool, one model, before the switch
  s["local_dram_hit_s"] = local_warm;
  s["pool_bytes_with_a_and_b"] = pool_bytes_ab;
  s["pool_holds_a_and_b"] = pool_holds_both;
  s["hit_rate"] = {{"no_cache", 0.0}, {"local_dram", local_hit}, {"ems", ems_hit}};
  s["hit_rate_basis"] = "N instances serving N models, a switch to any one of them: local DRAM "
                        "holds the node's own model (1/N), the pool holds every model (measured: "
                        "A and B both whole in the pool)";
  const double avg_no_cache = switch_no_cache.last;
  const double avg_local = local_hit * local_warm + (1 - local_hit) * switch_no_cache.last;
  const double avg_ems = ems_hit * switch_ems.last + (1 - ems_hit) * switch_no_cache.last;
  s["average_s"] = {{"no_cache", avg_no_cache}, {"local_dram", avg_local}, {"ems", avg_ems}};

  auto& ratio = out["ratios"];
  ratio["cold_start_no_cache_over_ems"] = no_cache.last / ems_cold.last;
  ratio["cold_start_mean_no_cache_over_ems"] = no_cache.mean / ems_cold.mean;
  ratio["bucket_bytes_no_cache_over_ems"] =
      static_cast<double>(no_cache.bucket_bytes) / static_cast<double>(ems_cold.bucket_bytes);
  ratio["dram_overhead_local_over_ems"] =
      static_cast<double>(n) * m / static_cast<double>(std::max<uint64_t>(1, pool_bytes_a));
  ratio["switch_no_cache_over_ems"] = switch_no_cache.last / switch_ems.last;

  const auto text = out.dump(2);
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  if (json_file) {
    std::ofstream f(*json_file);
    f << text << "\n";
    if (!f) throw std::runtime_error("bench model-cache: cannot write " + *json_file);
  }

  // The table, Table 2's rows.
  std::fprintf(stderr,
               "\nModel caching (Table 2): %s, %s, %d instances, bucket %.3g B/s (one model %.2f "
               "s, %d models %.2f s at the cap)\nloaded = OBS->local DRAM copy; weights not "
               "parsed, no DRAM->NPU\n\n",
               id.c_str(), gb(m).c_str(), n, bandwidth, m / bandwidth, n, m * n / bandwidth);
  std::fprintf(stderr, "| %-28s | %-16s | %-16s | %-16s |\n", "", "No cache", "Local DRAM", "EMS");
  std::fprintf(stderr, "|%s|%s|%s|%s|\n", std::string(30, '-').c_str(),
               std::string(18, '-').c_str(), std::string(18, '-').c_str(),
               std::string(18, '-').c_str());
  const auto row = [](const char* what, const std::string& a, const std::string& b,
                      const std::string& c) {
    std::fprintf(stderr, "| %-28s | %-16s | %-16s | %-16s |\n", what, a.c_str(), b.c_str(),
                 c.c_str());
  };
  const auto sec = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f s", v);
    return std::string(buf);
  };
  const auto pct = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", v * 100);
    return std::string(buf);
  };
  const auto times = [&](double v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.2gx (%s)", v, gb(v * m).c_str());
    return std::string(buf);
  };
  row("cold start, last (OBS->DRAM)", sec(no_cache.last), sec(no_cache.last), sec(ems_cold.last));
  row("cold start, mean", sec(no_cache.mean), sec(no_cache.mean), sec(ems_cold.mean));
  row("bucket bytes, cold start", gb(static_cast<double>(no_cache.bucket_bytes)),
      gb(static_cast<double>(no_cache.bucket_bytes)),
      gb(static_cast<double>(ems_cold.bucket_bytes)));
  row("warm start", "n/a", sec(local_warm), sec(ems_warm.last));
  row("DRAM overhead", "0", times(n), times(static_cast<double>(pool_bytes_a) / m));
  row("switch hit rate", pct(0), pct(local_hit), pct(ems_hit));
  row("switch latency, hit / miss", "- / " + sec(switch_no_cache.last),
      sec(local_warm) + " / " + sec(switch_no_cache.last), sec(switch_ems.last) + " / -");
  row("average switch latency", sec(avg_no_cache), sec(avg_local), sec(avg_ems));
  std::fprintf(stderr, "\ncold start no cache / EMS: %.2fx; bucket bytes no cache / EMS: %.2fx\n",
               no_cache.last / ems_cold.last,
               static_cast<double>(no_cache.bucket_bytes) /
                   static_cast<double>(ems_cold.bucket_bytes));
  return 0;
}

} // namespace supernode::apps
