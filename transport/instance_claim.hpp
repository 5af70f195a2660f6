#pragma once
// The instance name a process that joins a live cluster (`supernode role KIND --join ...`)
// takes: the lowest "<role>-<n>" past the config's instances of that role that no live process
// holds. A name is held by an flock on <run_dir>/names/<name>.lock for the life of the process,
// so two processes joining at once never take the same name, and a name whose process died is
// free again (the kernel drops the lock). Processes that join share the run folder (one host,
// or a volume every container mounts), as they share the key folder.
//
// With keys made on start (no [cluster] key_dir) the claimed name gets a key pair; with a
// configured key_dir only names that already have one may be taken (keys are handed out, not
// made, when a deployment provisions them).

#include "transport/cluster_config.hpp"

#include <string>

namespace supernode::transport {

class instance_claim {
public:
  // Claims a name for `role` in `cluster`; throws std::runtime_error naming the reason (no
  // free name with a key pair, the run folder is not private).
  instance_claim(const cluster_config& cluster, const std::string& role);
  ~instance_claim();
  instance_claim(const instance_claim&) = delete;
  instance_claim& operator=(const instance_claim&) = delete;

  const std::string& name() const { return name_; }
  int role_index() const { return role_index_; }

  // Names tried before giving up: a cluster this large is not a test's.
  static constexpr int max_joined = 1024;

private:
  std::string name_;
  int role_index_ = 0;
  int fd_ = -1;
};

} // namespace supernode::transport
