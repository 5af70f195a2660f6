#include "apps/bench/model_cache_files.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace supernode::apps {

namespace fs = std::filesystem;

std::map<std::string, uint64_t> files_of(const fs::path& dir) {
  std::map<std::string, uint64_t> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().filename().string()] = e.file_size();
  return out;
}

void verify_copy(const fs::path& original, const fs::path& copy, bool bytes) {
  const auto want = files_of(original);
  if (files_of(copy) != want)
    throw std::runtime_error("bench model-cache: " + copy.string() +
                             " does not hold the files of " + original.string());
  if (!bytes) return;
  std::vector<char> a(8 << 20), b(8 << 20);
  for (const auto& [name, size] : want) {
    std::ifstream fa(original / name, std::ios::binary), fb(copy / name, std::ios::binary);
    for (uint64_t off = 0; off < size;) {
      const auto n = static_cast<std::streamsize>(std::min<uint64_t>(a.size(), size - off));
      fa.read(a.data(), n);
      fb.read(b.data(), n);
      if (!fa || !fb || std::memcmp(a.data(), b.data(), static_cast<size_t>(n)) != 0)
        throw std::runtime_error("bench model-cache: " + (copy / name).string() + " differs from " +
                                 (original / name).string() + " in the " + std::to_string(n) +
                                 " bytes from offset " + std::to_string(off));
      off += static_cast<uint64_t>(n);
    }
  }
}

void make_switch_model(const fs::path& a, const fs::path& b) {
  fs::create_directories(b);
  bool linked = true;
  for (const auto& [name, size] : files_of(a)) {
    std::error_code ec;
    if (linked) fs::create_hard_link(a / name, b / name, ec);
    if (!linked || ec) {
      linked = false;
      fs::copy_file(a / name, b / name, fs::copy_options::overwrite_existing);
    }
  }
  std::fprintf(stderr, "bench model-cache: model B = %s (%s %s)\n", b.c_str(),
               linked ? "hard links to" : "a copy of", a.c_str());
}

void copy_folder(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& [name, size] : files_of(from))
    fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
}

scoped_dir::scoped_dir(fs::path p)
    : path_(std::move(p)), remove_on_signal_([path = path_] {
        // Loader threads may still be writing: later passes take what they created meanwhile.
        for (int pass = 0; pass < 3; ++pass) {
          std::error_code ec;
          fs::remove_all(path, ec);
        }
      }) {
  std::error_code ec;
  fs::create_directories(path_, ec);
  if (ec)
    throw std::runtime_error("bench model-cache: cannot create " + path_.string() + ": " +
                             ec.message());
}

scoped_dir::~scoped_dir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  if (ec)
    std::fprintf(stderr, "bench model-cache: cannot remove %s: %s\n", path_.c_str(),
                 ec.message().c_str());
}

} // namespace supernode::apps
