#include "services/cluster/control_socket.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace supernode::services::cluster {

namespace {

using clock_type = std::chrono::steady_clock;

sockaddr_un address_of(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const auto& text = path.native();
  if (text.size() >= sizeof addr.sun_path)
    throw std::runtime_error("control socket path " + text + " is longer than " +
                             std::to_string(sizeof addr.sun_path - 1) + " bytes");
  std::memcpy(addr.sun_path, text.c_str(), text.size() + 1);
  return addr;
}

int stream_socket() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket failed: ") + std::strerror(errno));
  return fd;
}

// A connected socket, or -1 when nothing listens at `path`.
int connect_to(const std::filesystem::path& path) {
  const auto addr = address_of(path);
  const int fd = stream_socket();
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return fd;
  ::close(fd);
  return -1;
}

uid_t peer_uid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return static_cast<uid_t>(-1);
  return cred.uid;
}

} // namespace

control_listener::control_listener(std::filesystem::path path) : path_(std::move(path)) {
  if (const int live = connect_to(path_); live >= 0) {
    ::close(live);
    throw std::runtime_error("a supervisor already listens on " + path_.string());
  }
  const auto temporary = path_.string() + "." + std::to_string(::getpid());
  const auto addr = address_of(temporary);
  fd_ = stream_socket();
  ::unlink(temporary.c_str());
  auto fail = [&](const std::string& what) {
    const std::string why = std::strerror(errno);
    ::close(fd_);
    ::unlink(temporary.c_str());
    throw std::runtime_error("control socket " + path_.string() + ": " + what + ": " + why);
  };
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) fail("bind");
  if (::chmod(temporary.c_str(), 0600) != 0) fail("chmod");
  if (::listen(fd_, 16) != 0) fail("listen");
  if (::fcntl(fd_, F_SETFL, O_NONBLOCK) != 0) fail("fcntl");
  // A leftover of a supervisor that died is replaced: nothing listened on it (checked above).
  if (::rename(temporary.c_str(), path_.c_str()) != 0) fail("rename");
}

control_listener::~control_listener() {
  ::close(fd_);
  ::unlink(path_.c_str());
}

int control_listener::accept_own_user() {
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return -1;
  if (peer_uid(fd) != ::geteuid()) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::optional<std::string> ask_control(const std::filesystem::path& path,
                                       const std::string& request,
                                       std::chrono::milliseconds timeout) {
  const int fd = connect_to(path);
  if (fd < 0) return std::nullopt;
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } close_at_end{fd};
  // The listener checks us; we check it (a socket planted by another user is not our supervisor).
  if (peer_uid(fd) != ::geteuid())
    throw std::runtime_error("control socket " + path.string() + " is another user's");
  const std::string line = request + "\n";
  if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
    return std::nullopt;
  const auto deadline = clock_type::now() + timeout;
  std::string answer;
  for (;;) {
    if (const auto nl = answer.find('\n'); nl != std::string::npos) return answer.substr(0, nl);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0)
      throw std::runtime_error("the supervisor on " + path.string() + " did not answer in " +
                               std::to_string(timeout.count()) + " ms");
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR)
      throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) return std::nullopt; // it went away without answering
    if (n > 0) answer.append(buf, static_cast<size_t>(n));
  }
}

} // namespace supernode::services::cluster
