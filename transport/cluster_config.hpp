#pragma once
// A deployment shape: which processes run which role instances, which planes exist and which
// plane carries which flow. One TOML file per shape (configs/); the same file serves every
// process of the cluster, and every endpoint address is derived from it, so processes find
// each other without a discovery service. Instances added at run time announce themselves with
// member_join instead.
//
// Every key, with its type, default and range: docs/configuration.md.
//
//   [cluster]   name = "demo"   run_dir = "/tmp/supernode-demo"
//               heartbeat_ms = 100   missed_heartbeats = 5
//   [planes.vpc]  kind = "zmq"  transport = "ipc"            # or "tcp" with host, base_port
//   [planes.ub]   kind = "shm"  ring_bytes = 67108864
//   [flows]       control = "vpc"   bulk = "rdma"   dispatch = "ub"
//   [process.decode]  roles = ["decode", "expert_shard"]   count = 2   threads = 1   cpus = [1]
//                     restart = "on-failure"   max_restarts = 5   restart_window_s = 60
//
// Process "decode" #1 hosts instances "decode-1" and "expert_shard-1". With per_process = 4 it
// would host decode-4..7 and expert_shard-4..7 (ranks as threads of one process).

#include "transport/config_document.hpp"
#include "transport/liveness.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::transport {

struct config_table_doc; // config_schema.hpp

struct plane_config {
  std::string name;
  std::string kind;              // inproc | shm | zmq
  std::string transport = "ipc"; // zmq: ipc | tcp
  std::string host = "127.0.0.1";
  int base_port = 0;
  size_t queue_limit = 4096;
  size_t ring_bytes = size_t{8} << 20; // shm: per ordered pair of peers
};

// When the supervisor of `cluster up` starts a process of a kind again after it ended.
enum class restart_mode {
  always,     // whatever the exit
  on_failure, // an exit code other than 0, or a signal
  never,
};

struct process_config {
  std::string name;
  std::vector<std::string> roles;
  int count = 1;
  int threads = 0;       // compute threads of each process; 0: all cores
  int per_process = 1;   // instances of each role in one process (ranks as threads)
  std::vector<int> cpus; // CPUs each process is pinned to; empty: not pinned
  // Restarts (services/cluster/restart_policy.hpp): the first after restart_backoff, each
  // further one after twice the last wait up to restart_backoff_max; more than max_restarts
  // failures within restart_window is given up on, and a process up for restart_window starts
  // its back-off afresh.
  restart_mode restart = restart_mode::on_failure;
  std::chrono::milliseconds restart_backoff{200};
  std::chrono::milliseconds restart_backoff_max{5000};
  std::chrono::seconds restart_window{60};
  int max_restarts = 5;
  // A process that stops showing signs of life (its role actors' ticks stop touching its
  // liveness file: SIGSTOPped, deadlocked) for this long is killed by the supervisor and so
  // restarted. Unset (-1): three times the cluster's liveness bound (heartbeat_ms x
  // missed_heartbeats), so peers fence it and recover its work first; 0: never.
  std::chrono::milliseconds liveness_timeout{-1};
};

struct instance_config {
  std::string name; // "<role>-<index>"
  std::string role;
  std::string process;
  int index = 0;      // of its process
  int ordinal = 0;    // position among all instances, for port numbering
  int role_index = 0; // among the instances of its role: the number in its name
  // Not in the config: this process joined a live cluster (`role --join`), binds ephemeral
  // tcp ports or ipc paths of its own and announces them in member_join.
  bool joined = false;
};

struct cluster_config {
  std::string name = "supernode";
  std::filesystem::path run_dir;
  // Where the instances' key pairs are (cluster_keys.hpp): [cluster] key_dir as configured;
  // keys_dir() is what to use. Unconfigured, it is <run_dir>/keys and processes create the
  // missing pairs there on start (one host: nobody needs to hand keys out).
  std::filesystem::path key_dir;
  std::filesystem::path keys_dir() const { return key_dir.empty() ? run_dir / "keys" : key_dir; }
  bool keys_made_on_start() const { return key_dir.empty(); }
  // [cluster] heartbeat_ms and missed_heartbeats, flat for the file's table; their defaults are
  // liveness_options' own.
  std::chrono::milliseconds heartbeat_interval = liveness_options{}.heartbeat_interval;
  int missed_heartbeats = liveness_options{}.missed_heartbeats;
  liveness_options liveness() const { return {heartbeat_interval, missed_heartbeats}; }
  // How long a member may stay silent before its peers declare it down (and fence it).
  std::chrono::milliseconds liveness_bound() const { return liveness().bound(); }
  std::map<std::string, plane_config> planes;
  std::map<std::string, std::string> flows; // flow -> plane name
  std::vector<process_config> processes;

  // Every role instance of every process, in config order.
  const std::vector<instance_config>& instances() const { return instances_; }
  // The instances process `process` #index hosts; throws naming the process when unknown.
  std::vector<instance_config> instances_of(const std::string& process, int index) const;
  const instance_config& instance(const std::string& name) const;
  // Adds instance `role`-`role_index`, hosted alone by a process of kind `process` that joined
  // at run time (instance_claim.hpp picks the name), and returns it. Its process index is its
  // role index, beyond the kind's configured count.
  const instance_config& add_joined_instance(const std::string& process, const std::string& role,
                                             int role_index);
  const plane_config& plane_for_flow(const std::string& flow) const;
  // Address of an instance's endpoint on a plane: channel "control", "bulk" or "ep" (its
  // expert-parallel rank fabric).
  std::string address(const instance_config& instance, const plane_config& plane,
                      const std::string& channel) const;
  // A zmq tcp plane's host = "{process}": every instance on a host of its own, named after its
  // process slot ("decode-1"; '_' as '-'), or this machine's name for a joined instance.
  static constexpr const char* per_process_host = "{process}";
  static std::string process_host(const instance_config& instance);

  // Reads the topology tables ([cluster], [planes.<name>], [flows], [process.<name>]) of a
  // parsed file. Strict (config_document.hpp): throws std::runtime_error naming the file, line,
  // table and key of an unknown key, a wrong type or a value out of range. Other top-level tables
  // are left to their readers: services::cluster_file reads a whole file and rejects tables no
  // reader knows.
  static cluster_config from(const config_document& file);
  // from() on text or a file that holds a topology only (tests, tools).
  static cluster_config parse(std::string_view toml_text, const std::string& source);
  static cluster_config load(const std::filesystem::path& file);
  // The topology tables and their keys, as docs/configuration.md lists them.
  static std::vector<config_table_doc> tables();

private:
  std::vector<instance_config> instances_;
};

} // namespace supernode::transport
