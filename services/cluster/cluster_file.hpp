#pragma once
// Writing a cluster config for a run of its own: a base text (one of configs/, or a template of
// the caller's) with `key = value` lines set the way a person would edit them, comments and
// everything else left as written. For the benchmarks and tests that generate clusters; reading
// a config back is transport/cluster_config's business, not this file's.

#include <filesystem>
#include <string>

namespace supernode::services::cluster {

// `text` as a TOML basic string, quoted and escaped.
std::string toml_string(const std::string& text);

class cluster_file {
public:
  explicit cluster_file(std::string base_text = "") : text_(std::move(base_text)) {}
  // The text of `config`; throws std::runtime_error when it cannot be read.
  static cluster_file read(const std::filesystem::path& config);

  // Sets `key = value` in [table] (the table is added when missing); `value` is TOML as written
  // ("16", "true", "[\"a\"]").
  cluster_file& set(const std::string& table, const std::string& key, const std::string& value);
  // The same with a string value.
  cluster_file& set_string(const std::string& table, const std::string& key,
                           const std::string& value);
  // [cluster] name and run_dir: the processes' names, shared memory and run folder of its own.
  cluster_file& own_cluster(const std::string& name, const std::filesystem::path& run_dir);

  const std::string& text() const { return text_; }
  // Writes the text to `file`; throws std::runtime_error when it cannot.
  void write(const std::filesystem::path& file) const;

private:
  std::string text_;
};

} // namespace supernode::services::cluster
