#pragma once
// Files and folders only the cluster's user may read: run folders, key folders, SSD tiers, logs
// and pid files. A folder is created 0700; one that exists must belong to this user and be
// writable by nobody else, or it is refused naming its path, owner and mode (another local user
// could otherwise bind sockets or plant files in it). Files are created 0600.

#include <filesystem>
#include <string>
#include <string_view>

namespace supernode::transport {

// Creates `dir` (and missing parents, 0700 each) or checks the existing one: owned by the
// effective user, no group or world write. Throws std::runtime_error naming the problem.
void ensure_private_dir(const std::filesystem::path& dir);

// The reason `dir` is not private ("" when it is): another owner, group/world write, or not a
// folder. Does not create anything.
std::string private_dir_problem(const std::filesystem::path& dir);

// Opens `file` for writing with mode 0600 (flags such as O_TRUNC or O_APPEND added to
// O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW); an existing file is chmod-ed to 0600. Returns the
// descriptor; throws naming the file on failure.
int open_private_file(const std::filesystem::path& file, int extra_flags);

// Writes `bytes` to `file` (0600), replacing what was there, through a temporary file and a
// rename so readers see the old or the new content, never a part.
void write_private_file(const std::filesystem::path& file, std::string_view bytes);

// Like write_private_file, but only when `file` does not exist yet: true if this call created it,
// false if it was there (another process won the race; its content stays).
bool create_private_file(const std::filesystem::path& file, std::string_view bytes);

} // namespace supernode::transport
