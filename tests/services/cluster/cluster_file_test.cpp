// Generated cluster configs: keys set in place or added with their table, comments kept, strings
// quoted as TOML reads them, and the file written where asked.

#include "services/cluster/cluster_file.hpp"
#include "services/cluster/role_launch.hpp"

#include <filesystem>
#include <gtest/gtest.h>
#include <unistd.h>

namespace cl = supernode::services::cluster;

TEST(cluster_file, sets_keys_in_place_and_keeps_the_rest) {
  cl::cluster_file f("# a comment\n[cluster]\nname = \"x\" # why\nheartbeat_ms = 100\n\n"
                     "[process.decode]\ncount = 2\n");
  f.set("process.decode", "count", "1").set("ems", "dram_bytes", "4096");
  EXPECT_EQ(f.text(), "# a comment\n[cluster]\nname = \"x\" # why\nheartbeat_ms = 100\n\n"
                      "[process.decode]\ncount = 1\n\n[ems]\ndram_bytes = 4096\n");
}

TEST(cluster_file, own_cluster_names_it_and_its_run_folder) {
  cl::cluster_file f("[cluster]\nname = \"base\"\n");
  f.own_cluster("bench-1", "/tmp/run dir");
  EXPECT_EQ(f.text(), "[cluster]\nrun_dir = \"/tmp/run dir\"\nname = \"bench-1\"\n");
}

TEST(cluster_file, strings_are_quoted_and_escaped) {
  EXPECT_EQ(cl::toml_string("plain"), "\"plain\"");
  EXPECT_EQ(cl::toml_string("a \"b\" \\ c"), "\"a \\\"b\\\" \\\\ c\"");
  EXPECT_EQ(cl::toml_string("tab\there"), "\"tab\\u0009here\"");
}

TEST(cluster_file, writes_and_reads_back) {
  const auto file =
      std::filesystem::temp_directory_path() / ("cluster-file-" + std::to_string(::getpid()));
  cl::cluster_file("[planes.ub]\n").set_string("planes.ub", "kind", "shm").write(file);
  EXPECT_EQ(cl::read_text_file(file), "[planes.ub]\nkind = \"shm\"\n");
  EXPECT_EQ(cl::cluster_file::read(file).text(), "[planes.ub]\nkind = \"shm\"\n");
  std::filesystem::remove(file);
  EXPECT_THROW(cl::cluster_file::read(file), std::runtime_error);
  EXPECT_THROW(cl::cluster_file("").write(file / "in-a-missing-folder"), std::runtime_error);
}
