#include "apps/bench/bench_report.hpp"

#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace supernode::apps {

void write_text_file(const std::filesystem::path& file, const std::string& text) {
  std::ofstream f(file, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write " + file.string());
}

void emit_report(const std::string& text, const std::optional<std::string>& file) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  if (file) write_text_file(*file, text);
}

} // namespace supernode::apps
