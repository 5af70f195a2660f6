#pragma once
// The folders `bench model-cache` reads and makes: a model folder's files, byte-for-byte checks
// of a loaded copy, model B as links to model A, and local copies removed afterwards (also
// when the bench is interrupted).

#include "apps/bench/stop_signals.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace supernode::apps {

// The folder's files (name -> size), directly in it.
std::map<std::string, uint64_t> files_of(const std::filesystem::path& dir);

// The copy holds exactly the original folder's files and sizes; with `bytes`, the same bytes.
// Throws naming the first difference.
void verify_copy(const std::filesystem::path& original, const std::filesystem::path& copy,
                 bool bytes);

// Model B: the files of A under another folder name (so another model id and other keys), as
// hard links; copies when the file system refuses links.
void make_switch_model(const std::filesystem::path& a, const std::filesystem::path& b);

// A plain copy of a folder: the warm start from a node's own DRAM cache.
void copy_folder(const std::filesystem::path& from, const std::filesystem::path& to);

// A folder created now and removed on destruction, or by the stop-signal watcher.
class scoped_dir {
public:
  explicit scoped_dir(std::filesystem::path p);
  ~scoped_dir();
  scoped_dir(const scoped_dir&) = delete;
  scoped_dir& operator=(const scoped_dir&) = delete;
  const std::filesystem::path& path() const { return path_; }

private:
  std::filesystem::path path_;
  on_stop_signal remove_on_signal_;
};

} // namespace supernode::apps
