#include "transport/private_files.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <pwd.h>
#include <random>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace supernode::transport {

namespace {

namespace fs = std::filesystem;

std::string user_name(uid_t uid) {
  if (const passwd* pw = ::getpwuid(uid)) return pw->pw_name;
  return "uid " + std::to_string(uid);
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

[[noreturn]] void fail(const std::string& what, const fs::path& path) {
  throw std::runtime_error(what + " " + path.string() + ": " + std::strerror(errno));
}

void write_all(int fd, std::string_view bytes, const fs::path& path) {
  while (!bytes.empty()) {
    const auto n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail("cannot write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// A temporary sibling of `file`, written and synced, with mode 0600.
fs::path write_temporary(const fs::path& file, std::string_view bytes) {
  std::random_device rd;
  std::string name = ".";
  name += file.filename().string();
  name += ".tmp-";
  name += std::to_string(::getpid());
  name += '-';
  name += std::to_string(rd());
  const auto tmp = file.parent_path() / name;
  const int fd = open_private_file(tmp, O_EXCL);
  write_all(fd, bytes, tmp);
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail("cannot write", tmp);
  return tmp;
}

} // namespace

std::string private_dir_problem(const fs::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return "cannot inspect: " + std::string(std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return "is not a folder";
  if (st.st_uid != ::geteuid())
    return "belongs to " + user_name(st.st_uid) + ", not to " + user_name(::geteuid()) + " (mode " +
           octal_mode(st.st_mode) + ")";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return "is writable by its group or by everyone (mode " + octal_mode(st.st_mode) + ", owner " +
           user_name(st.st_uid) + ")";
  return "";
}

void ensure_private_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    if (dir.has_parent_path() && dir.parent_path() != dir && !fs::exists(dir.parent_path(), ec))
      ensure_private_dir(dir.parent_path());
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) fail("cannot create", dir);
  }
  if (const auto problem = private_dir_problem(dir); !problem.empty())
    throw std::runtime_error("refusing folder " + dir.string() + ": it " + problem +
                             "; remove it or give it to this user with mode 0700");
  // Made by us earlier, or by a umask that let group/world read: nobody else reads it now.
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0 && (st.st_mode & 077)) ::chmod(dir.c_str(), 0700);
}

int open_private_file(const fs::path& file, int extra_flags) {
  const int fd =
      ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | extra_flags, 0600);
  if (fd < 0) fail("cannot open", file);
  if (::fchmod(fd, 0600) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail("cannot make private", file);
  }
  return fd;
}

void write_private_file(const fs::path& file, std::string_view bytes) {
  const auto tmp = write_temporary(file, bytes);
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail("cannot replace", file);
  }
}

bool create_private_file(const fs::path& file, std::string_view bytes) {
  const auto tmp = write_temporary(file, bytes);
  // link() fails when the name exists: of two processes creating the same file, one wins whole.
  const bool created = ::link(tmp.c_str(), file.c_str()) == 0;
  const int saved = errno;
  ::unlink(tmp.c_str());
  if (!created && saved != EEXIST) {
    errno = saved;
    fail("cannot create", file);
  }
  return created;
}

} // namespace supernode::transport
