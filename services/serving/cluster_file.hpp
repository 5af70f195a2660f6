#pragma once
// A cluster config file read the one way every process reads it: parsed once, the topology
// (transport::cluster_config) and what the cluster serves (serving_config) taken from the same
// parsed document, and every top-level table checked against the tables the two readers know.
// Any unknown table or key, wrong type or value out of range throws std::runtime_error naming
// the file, line, table and key (with the nearest known name when there is one), before
// anything starts.

#include "services/serving/serving_config.hpp"
#include "transport/cluster_config.hpp"
#include "transport/config_schema.hpp"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::services {

struct cluster_file {
  std::string source; // the file, for messages
  transport::cluster_config cluster;
  serving_config serving;

  static cluster_file parse(std::string_view toml_text, const std::string& source);
  static cluster_file load(const std::filesystem::path& file);
  static cluster_file from(const transport::config_document& file);

  // Every table a cluster file may hold, in the order docs/configuration.md lists them.
  static std::vector<transport::config_table_doc> tables();
};

} // namespace supernode::services
