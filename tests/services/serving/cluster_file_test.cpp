// A cluster file read once for the topology and the serving tables, strictly: every config the
// project ships loads, each failure kind names file, line, table and key, and
// docs/configuration.md lists exactly the keys the readers know.

#include "services/serving/cluster_file.hpp"
#include "transport/toml_edit.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

using namespace supernode;
using services::cluster_file;
using transport::set_toml_key;

namespace {

const std::filesystem::path source_dir = SUPERNODE_SOURCE_DIR;

std::string text_of(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr const char* shape = "[process.all]\nroles = [\"gateway\"]\n";

std::string error_of(const std::string& text) {
  try {
    cluster_file::parse(text, "x.toml");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(cluster_file, every_config_the_project_ships_loads) {
  size_t files = 0;
  for (auto& entry : std::filesystem::directory_iterator(source_dir / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    ++files;
    EXPECT_NO_THROW(cluster_file::load(entry.path())) << entry.path();
  }
  EXPECT_GE(files, 9u);
}

TEST(cluster_file, reads_topology_and_serving_tables_from_one_parse) {
  auto f = cluster_file::load(source_dir / "configs" / "pdc-ems.toml");
  EXPECT_EQ(f.source, (source_dir / "configs" / "pdc-ems.toml").string());
  EXPECT_EQ(f.cluster.name, "pdc-ems");
  EXPECT_EQ(f.cluster.plane_for_flow("ems").name, "ub");
  EXPECT_EQ(f.serving.decode_max_batch, 64);
  EXPECT_EQ(f.serving.ems.block_tokens, 64);
  EXPECT_TRUE(f.serving.ems.read_over_ub);
  ASSERT_EQ(f.serving.ems.quotas.size(), 1u);
  EXPECT_EQ(f.serving.ems.quotas[0], (std::pair<std::string, uint64_t>{"context", 4294967296}));

  auto g = cluster_file::parse(std::string(shape) +
                                   "[model]\nprecision = \"fp32\"\n[ep]\nmicrobatch = true\n"
                                   "eplb_interval = 4\n[ems]\nread_path = \"vpc\"\n"
                                   "object_store_bandwidth = 0\n",
                               "x.toml");
  EXPECT_EQ(g.serving.precision, model::precision::fp32);
  EXPECT_TRUE(g.serving.microbatch);
  EXPECT_EQ(g.serving.eplb_interval, 4);
  EXPECT_FALSE(g.serving.ems.read_over_ub);
  EXPECT_EQ(g.serving.ems.object_store_bandwidth, 0.0);
  EXPECT_EQ(g.serving.block_size, 16); // absent: the default
}

TEST(cluster_file, unknown_keys_and_tables_suggest_the_nearest_known_name) {
  const std::string base = text_of(source_dir / "configs" / "colocated.toml");
  EXPECT_NE(error_of(set_toml_key(base, "decode", "max_bach", "8"))
                .find(": [decode] unknown key 'max_bach' (did you mean 'max_batch'?)"),
            std::string::npos);
  EXPECT_EQ(error_of(std::string(shape) + "[decod]\nmax_batch = 8\n"),
            "x.toml:3: unknown table [decod] (did you mean [decode]?)");
  EXPECT_EQ(error_of(std::string(shape) + "[gateway]\nprot = 80\n"),
            "x.toml:4: [gateway] unknown key 'prot' (did you mean 'port'?)");
  EXPECT_EQ(error_of(std::string(shape) + "[ems.quota]\ncontext = 1\n"),
            "x.toml:3: unknown table [ems.quota] (did you mean [ems.quotas]?)");
  EXPECT_EQ(error_of(std::string(shape) + "[proces.b]\nroles = [\"x\"]\n"),
            "x.toml:3: unknown table [proces] (did you mean [process]?)");
  EXPECT_EQ(
      error_of(std::string(shape) + "[tokenizer]\npath = \"t\"\n")
          .rfind("x.toml:3: unknown table [tokenizer] (known: [cluster], [planes], [flows], "
                 "[process], [model], [kv], [gateway], [scheduler], [prefill], [decode], [ep], "
                 "[ems], [planner])",
                 0),
      0u);
}

TEST(cluster_file, wrong_types_ranges_and_rules_name_file_line_table_and_key) {
  // Each case: tables after a one-process shape (lines 1-2), and the message they fail with.
  const std::pair<const char*, const char*> cases[] = {
      // Wrong types.
      {"[decode]\nmax_batch = \"64\"\n",
       "x.toml:4: [decode] max_batch must be an integer, got a string"},
      {"[ep]\nmicrobatch = 1\n", "x.toml:4: [ep] microbatch must be a boolean, got an integer"},
      {"[ems.quotas]\ncontext = \"1G\"\n",
       "x.toml:4: [ems.quotas] context must be an integer, got a string"},
      // Out of range.
      {"[decode]\nmax_batch = 0\n", "x.toml:4: [decode] max_batch must be in [1, 4096], got 0"},
      {"[gateway]\nport = 70000\n", "x.toml:4: [gateway] port must be in [0, 65535], got 70000"},
      {"[model]\nprecision = \"bf16\"\n",
       "x.toml:4: [model] precision must be one of int8, fp32, got \"bf16\""},
      {"[ems]\ndram_high_watermark = 0\n",
       "x.toml:4: [ems] dram_high_watermark must be in (0, 1], got 0"},
      {"[ems]\nread_path = \"rdma\"\n",
       "x.toml:4: [ems] read_path must be one of ub, vpc, got \"rdma\""},
      // Rules across keys name the key that breaks them.
      {"[ep]\neplb_interval = 2\n", "x.toml:4: [ep] eplb_interval must be 0 or >= 4, got 2"},
      {"[kv]\nblock_size = 16\n[ems]\nblock_tokens = 24\n",
       "x.toml:6: [ems] block_tokens must be a multiple of [kv] block_size (16), got 24"},
      {"[ems]\nmodel_cache = true\n",
       "x.toml:3: [ems] object_store must name a folder when model_cache = true"},
  };
  for (auto& [tables, message] : cases) EXPECT_EQ(error_of(shape + std::string(tables)), message);
}

TEST(cluster_file, docs_configuration_md_lists_every_key_the_readers_know) {
  const std::string doc = text_of(source_dir / "docs" / "configuration.md");
  const std::string begin = "<!-- BEGIN keys: generated by `supernode config keys` -->\n";
  const std::string end = "<!-- END keys -->";
  const size_t from = doc.find(begin), to = doc.find(end);
  ASSERT_NE(from, std::string::npos) << "docs/configuration.md lacks the line " << begin;
  ASSERT_NE(to, std::string::npos) << "docs/configuration.md lacks the line " << end;
  const std::string listed = doc.substr(from + begin.size(), to - from - begin.size());
  const auto tables = cluster_file::tables();
  const std::string expected = transport::config_reference_markdown(tables);
  // Every table and key by name first, so the failure says what is missing.
  for (auto& t : tables) {
    EXPECT_NE(listed.find("### `[" + t.name + "]`"), std::string::npos) << "[" << t.name << "]";
    for (auto& k : t.keys)
      EXPECT_NE(listed.find("| `" + k.name + "` |"), std::string::npos)
          << "[" << t.name << "] " << k.name;
  }
  // Then every line, so a changed default, range or meaning fails too: the first that differs.
  std::istringstream doc_lines(listed), schema_lines(expected);
  std::string in_doc, in_schema;
  for (int line = 1; std::getline(schema_lines, in_schema); ++line) {
    if (!std::getline(doc_lines, in_doc)) in_doc = "(nothing)";
    if (in_doc != in_schema) {
      ADD_FAILURE() << "docs/configuration.md is out of date at line " << line
                    << " of its generated part: put the output of `supernode config keys` "
                       "between its BEGIN and END lines.\n  doc:    "
                    << in_doc << "\n  schema: " << in_schema;
      break;
    }
  }
  EXPECT_EQ(listed.size(), expected.size()) << "the generated part has lines the schema lacks";
}
