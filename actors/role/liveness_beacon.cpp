#include "actors/role/liveness_beacon.hpp"

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace supernode::actors {

void liveness_beat() {
  // By path, not by a descriptor kept open: the supervisor may make the file afresh.
  static const std::string path = [] {
    const char* p = std::getenv("SUPERNODE_LIVENESS_FILE");
    return std::string(p ? p : "");
  }();
  if (path.empty()) return;
  if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) == 0 || errno != ENOENT) return;
  // Not there yet: made private (the probe then sees it fresh). Failing that, the probe sees
  // silence, which is the truth it can tell.
  if (const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      fd >= 0)
    ::close(fd);
}

} // namespace supernode::actors
