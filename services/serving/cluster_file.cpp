#include "services/serving/cluster_file.hpp"

#include <algorithm>

namespace supernode::services {

cluster_file cluster_file::from(const transport::config_document& file) {
  std::vector<std::string> known;
  for (auto& t : tables()) {
    const std::string top = t.name.substr(0, t.name.find('.'));
    if (std::find(known.begin(), known.end(), top) == known.end()) known.push_back(top);
  }
  file.check_tables(known);
  cluster_file out{file.source(), transport::cluster_config::from(file),
                   serving_config::from(file)};
  out.serving.check_planner_topology(file, out.cluster);
  return out;
}

cluster_file cluster_file::parse(std::string_view text, const std::string& source) {
  return from(transport::config_document(text, source));
}

cluster_file cluster_file::load(const std::filesystem::path& file) {
  return from(transport::config_document::load(file));
}

std::vector<transport::config_table_doc> cluster_file::tables() {
  auto docs = transport::cluster_config::tables();
  for (auto& t : serving_config::tables()) docs.push_back(std::move(t));
  return docs;
}

} // namespace supernode::services
