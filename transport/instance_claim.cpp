#include "transport/instance_claim.hpp"

#include "transport/cluster_keys.hpp"
#include "transport/private_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/file.h>
#include <unistd.h>

namespace supernode::transport {

instance_claim::instance_claim(const cluster_config& cluster, const std::string& role) {
  int first = 0;
  for (auto& i : cluster.instances())
    if (i.role == role) first = std::max(first, i.role_index + 1);
  const auto dir = cluster.run_dir / "names";
  ensure_private_dir(dir);
  const cluster_keys keys(cluster.keys_dir());
  for (int n = first; n < first + max_joined; ++n) {
    const std::string name = role + "-" + std::to_string(n);
    if (!cluster.keys_made_on_start() && !keys.public_key(name)) continue;
    const int fd = open_private_file(dir / (name + ".lock"), 0);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) continue; // a live process holds it
      throw std::runtime_error("cannot lock " + (dir / (name + ".lock")).string() + ": " +
                               std::strerror(err));
    }
    if (cluster.keys_made_on_start()) keys.ensure({name});
    name_ = name;
    role_index_ = n;
    fd_ = fd;
    return;
  }
  throw std::runtime_error(
      "no free instance name for role '" + role + "' from " + role + "-" + std::to_string(first) +
      (cluster.keys_made_on_start()
           ? " (" + std::to_string(max_joined) + " are held by live processes)"
           : " with a key pair in " + cluster.keys_dir().string() +
                 " ([cluster] key_dir is configured: `supernode cluster keys` makes pairs)"));
}

instance_claim::~instance_claim() {
  if (fd_ >= 0) ::close(fd_);
}

} // namespace supernode::transport
