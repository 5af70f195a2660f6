#include "services/cluster/process_launcher.hpp"

#include "transport/private_files.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace supernode::services::cluster {

namespace {

using clock_type = std::chrono::steady_clock;

std::string errno_text(int err) {
  return std::strerror(err);
}

// A file descriptor closed on destruction unless released.
class owned_fd {
public:
  explicit owned_fd(int fd = -1) : fd_(fd) {}
  ~owned_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  owned_fd(owned_fd&& other) noexcept : fd_(other.release()) {}
  owned_fd& operator=(owned_fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }

private:
  int fd_;
};

// A copy of `fd` closed on exec, so no other child started meanwhile inherits it (dup() would
// leave it open in every program executed after).
owned_fd dup_cloexec(int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) throw std::runtime_error("dup failed: " + errno_text(errno));
  return owned_fd(copy);
}

std::pair<owned_fd, owned_fd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed: " + errno_text(errno));
  return std::pair<owned_fd, owned_fd>(owned_fd(fds[0]), owned_fd(fds[1]));
}

// The C strings the child executes with: built before the fork, since between fork and exec a
// child of a threaded parent may only make async-signal-safe calls (no allocation).
struct exec_arrays {
  std::vector<std::string> strings_argv, strings_env;
  std::vector<char*> argv, envp;
  std::string program;

  explicit exec_arrays(const launch_spec& spec) : strings_argv(spec.argv) {
    if (strings_argv.empty()) throw std::invalid_argument("launch: empty argv");
    program = spec.program.empty() ? strings_argv[0] : spec.program;
    for (auto& a : strings_argv) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (char** e = environ; e && *e; ++e) {
      const std::string entry(*e);
      const auto name = entry.substr(0, entry.find('='));
      bool overridden = false;
      for (auto& [key, value] : spec.env) overridden = overridden || key == name;
      if (!overridden) strings_env.push_back(entry);
    }
    for (auto& [key, value] : spec.env) strings_env.push_back(key + "=" + value);
    for (auto& e : strings_env) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

// The descriptors a child's stdin, stdout and stderr become (-1: ours).
struct child_fds {
  owned_fd in{-1}, out{-1}, err{-1}, log{-1}, pipe_read{-1};
};

child_fds open_child_fds(const launch_spec& spec) {
  child_fds fds;
  const bool logs = spec.stdout_to == output_to::file || spec.stderr_to == output_to::file;
  if (logs) {
    // Logs name requests, peers and errors: this user's alone (0600, also when the file was
    // there before).
    fds.log = owned_fd(transport::open_private_file(spec.log_file, O_TRUNC));
  }
  const bool needs_null =
      spec.stdin_null || spec.stdout_to == output_to::null || spec.stderr_to == output_to::null;
  owned_fd null(needs_null ? ::open("/dev/null", O_RDWR | O_CLOEXEC) : -1);
  if (spec.stderr_to == output_to::pipe && spec.stdout_to != output_to::pipe)
    throw std::invalid_argument("launch: stderr can only be piped back with stdout");
  auto target = [&](output_to to, owned_fd& slot) {
    if (to == output_to::file) slot = dup_cloexec(fds.log.get());
    if (to == output_to::null) slot = dup_cloexec(null.get());
    if (to == output_to::pipe) {
      auto [read_end, write_end] = make_pipe();
      fds.pipe_read = std::move(read_end);
      slot = std::move(write_end);
    }
  };
  target(spec.stdout_to, fds.out);
  if (spec.stderr_to == output_to::pipe)
    fds.err = dup_cloexec(fds.out.get()); // one pipe, the lines interleaved as written
  else
    target(spec.stderr_to, fds.err);
  if (spec.stdin_null) fds.in = dup_cloexec(null.get());
  return fds;
}

// In the child, after fork: only async-signal-safe calls.
void set_up_child(const child_fds& fds, bool new_session, bool die_with_parent) {
  if (new_session) ::setsid();
  if (die_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // dup2 onto itself would keep close-on-exec (a parent whose own fd 0-2 were closed).
  const auto place = [](int fd, int target) {
    if (fd < 0) return;
    if (fd == target)
      ::fcntl(fd, F_SETFD, 0);
    else
      ::dup2(fd, target);
  };
  place(fds.in.get(), STDIN_FILENO);
  place(fds.out.get(), STDOUT_FILENO);
  place(fds.err.get(), STDERR_FILENO);
  // A parent may block its stop signals for a watcher thread; a new program expects none.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

[[noreturn]] void exec_child(const exec_arrays& exec, int error_pipe) {
  // Only 0-2 go on: descriptors we inherited without close-on-exec (a shell's, a test
  // runner's) would otherwise pass to every child; the error pipe closes on exec itself.
  if (error_pipe > 3) ::close_range(3, static_cast<unsigned>(error_pipe) - 1, 0);
  ::close_range(static_cast<unsigned>(error_pipe) + 1, ~0u, 0);
  if (exec.program.find('/') != std::string::npos)
    ::execve(exec.program.c_str(), exec.argv.data(), exec.envp.data());
  else
    ::execvpe(exec.program.c_str(), exec.argv.data(), exec.envp.data());
  const int err = errno;
  [[maybe_unused]] auto n = ::write(error_pipe, &err, sizeof err);
  ::_exit(127);
}

} // namespace

std::string self_executable() {
  return "/proc/self/exe";
}

launch_spec self_command(std::vector<std::string> args) {
  launch_spec spec;
  spec.argv = {"supernode"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.program = self_executable();
  return spec;
}

bool exit_status::exited() const {
  return known && WIFEXITED(raw);
}
int exit_status::code() const {
  return exited() ? WEXITSTATUS(raw) : -1;
}
int exit_status::signal() const {
  return known && WIFSIGNALED(raw) ? WTERMSIG(raw) : 0;
}
bool exit_status::success() const {
  return exited() && code() == 0;
}
int exit_status::shell_code() const {
  return exited() ? code() : 128 + signal();
}

child_process child_process::launch(const launch_spec& spec) {
  const exec_arrays exec(spec);
  auto fds = open_child_fds(spec);
  auto [error_read, error_write] = make_pipe();
  // Our buffered output comes before the child's.
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + errno_text(errno));
  if (pid == 0) {
    set_up_child(fds, spec.new_session, spec.die_with_parent);
    exec_child(exec, error_write.get());
  }
  error_write.reset();
  child_process child(pid, fds.pipe_read.release());
  // The error pipe closes on a successful exec; an errno arrives when it failed.
  int err = 0;
  ssize_t n;
  while ((n = ::read(error_read.get(), &err, sizeof err)) < 0 && errno == EINTR) {}
  if (n == sizeof err) {
    child.wait();
    throw std::runtime_error("cannot execute " + exec.program + ": " + errno_text(err));
  }
  return child;
}

child_process child_process::fork_running(const std::function<int()>& body, bool die_with_parent) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + errno_text(errno));
  if (pid == 0) {
    const child_fds no_redirection;
    set_up_child(no_redirection, false, die_with_parent);
    int rc = 1;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "forked child %d: %s\n", static_cast<int>(::getpid()), e.what());
    }
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(rc); // not exit(): the parent's atexit handlers are not the child's to run
  }
  return child_process(pid, -1);
}

child_process::child_process(child_process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), out_(std::exchange(other.out_, -1)),
      reaped_(other.reaped_), status_(other.status_), buffer_(std::move(other.buffer_)) {}

child_process& child_process::operator=(child_process&& other) noexcept {
  if (this == &other) return *this;
  if (running()) kill();
  close_output();
  pid_ = std::exchange(other.pid_, -1);
  out_ = std::exchange(other.out_, -1);
  reaped_ = other.reaped_;
  status_ = other.status_;
  buffer_ = std::move(other.buffer_);
  return *this;
}

child_process::~child_process() {
  if (running()) kill();
  close_output();
}

void child_process::close_output() {
  if (out_ >= 0) ::close(std::exchange(out_, -1));
}

bool child_process::fill_buffer(clock_type::time_point deadline) {
  if (out_ < 0) return false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (deadline != clock_type::time_point::max() && left.count() <= 0) return false;
    pollfd p{out_, POLLIN, 0};
    const int ready = ::poll(
        &p, 1, deadline == clock_type::time_point::max() ? -1 : static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    char buf[4096];
    const ssize_t n = ::read(out_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }
}

std::optional<std::string> child_process::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = clock_type::now() + timeout;
  for (;;) {
    if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    if (!fill_buffer(deadline)) return std::nullopt;
  }
}

std::optional<std::string> child_process::wait_for_line(const std::string& prefix,
                                                        std::chrono::milliseconds timeout) {
  const auto deadline = clock_type::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    auto line = read_line(std::max(left, std::chrono::milliseconds(0)));
    if (!line) return std::nullopt;
    if (line->rfind(prefix, 0) == 0) return line;
  }
}

void child_process::for_each_line(const std::function<void(const std::string&)>& on_line) {
  for (;;) {
    if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      on_line(line);
      continue;
    }
    if (!fill_buffer(clock_type::time_point::max())) break;
  }
  if (!buffer_.empty()) on_line(std::exchange(buffer_, {})); // a last line without a newline
}

bool child_process::signal(int sig) {
  return running() && ::kill(pid_, sig) == 0;
}

std::optional<exit_status> child_process::reap(int flags) {
  if (reaped_) return status_;
  if (pid_ <= 0) return std::nullopt;
  int raw = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &raw, flags)) < 0 && errno == EINTR) {}
  if (r == pid_) {
    status_ = exit_status{raw, true};
  } else if (r < 0 && errno == ECHILD) {
    status_ = exit_status{0, false}; // reaped by someone else
  } else {
    return std::nullopt;
  }
  reaped_ = true;
  return status_;
}

std::optional<exit_status> child_process::try_wait() {
  return reap(WNOHANG);
}

std::optional<exit_status> child_process::wait_for(std::chrono::milliseconds timeout) {
  if (auto done = try_wait()) return done;
  const auto deadline = clock_type::now() + timeout;
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0) break;
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno == EINTR) continue;
      break;
    }
    // No pidfd (an old kernel): look again every few milliseconds.
    if (try_wait()) break;
    std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(5)));
  }
  if (pidfd >= 0) ::close(pidfd);
  return try_wait();
}

exit_status child_process::wait() {
  return reap(0).value_or(exit_status{0, false});
}

exit_status child_process::stop(std::chrono::milliseconds grace) {
  signal(SIGTERM);
  if (auto done = wait_for(grace)) return *done;
  return kill();
}

exit_status child_process::kill() {
  signal(SIGKILL);
  return wait();
}

pid_t child_process::release() {
  close_output();
  reaped_ = true; // nothing of ours waits for it any more
  return std::exchange(pid_, -1);
}

} // namespace supernode::services::cluster
