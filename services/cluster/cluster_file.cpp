#include "services/cluster/cluster_file.hpp"

#include "transport/toml_edit.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace supernode::services::cluster {

std::string toml_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

cluster_file cluster_file::read(const std::filesystem::path& config) {
  std::ifstream in(config, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + config.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return cluster_file(ss.str());
}

cluster_file& cluster_file::set(const std::string& table, const std::string& key,
                                const std::string& value) {
  text_ = transport::set_toml_key(std::move(text_), table, key, value);
  return *this;
}

cluster_file& cluster_file::set_string(const std::string& table, const std::string& key,
                                       const std::string& value) {
  return set(table, key, toml_string(value));
}

cluster_file& cluster_file::own_cluster(const std::string& name,
                                        const std::filesystem::path& run_dir) {
  set_string("cluster", "name", name);
  return set_string("cluster", "run_dir", run_dir.string());
}

void cluster_file::write(const std::filesystem::path& file) const {
  std::ofstream out(file, std::ios::binary);
  out << text_;
  out.close();
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

} // namespace supernode::services::cluster
