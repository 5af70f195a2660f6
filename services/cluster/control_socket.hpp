#pragma once
// The supervisor's local control socket: an AF_UNIX stream socket in the cluster's run folder
// (0700, owner-checked), itself 0600, that answers only peers of our own uid (SO_PEERCRED). The
// protocol is a line each way: one JSON request, one JSON answer (supervisor.hpp lists them).

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

namespace supernode::services::cluster {

class control_listener {
public:
  // Listens on `path`: bound under a temporary name, made 0600, then renamed into place, so a
  // client that finds the name finds it listening. Throws std::runtime_error naming the path
  // (too long for a socket address, or a live supervisor already answers there).
  explicit control_listener(std::filesystem::path path);
  ~control_listener(); // closes and removes the name
  control_listener(const control_listener&) = delete;
  control_listener& operator=(const control_listener&) = delete;

  int fd() const { return fd_; }
  const std::filesystem::path& path() const { return path_; }
  // A connection from a process of our uid (non-blocking, close-on-exec); -1 when there was
  // none to accept or its peer is another user (refused: closed unanswered).
  int accept_own_user();

private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// Sends `request` (one line) to the socket at `path` and returns the one-line answer; nothing
// when no supervisor listens there. Throws std::runtime_error when the answer does not come
// within `timeout` or the socket belongs to another user.
std::optional<std::string> ask_control(const std::filesystem::path& path,
                                       const std::string& request,
                                       std::chrono::milliseconds timeout);

} // namespace supernode::services::cluster
