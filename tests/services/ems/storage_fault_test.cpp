// The storage faults of a chaos run, in the code they hook: with a plan whose disk_full and
// slow_store windows are open (this binary names it in its environment before anything reads
// it), the MP server's SSD-tier writes fail as on a full disk and object-store reads come late.
// The windows' opening and closing are fault_injection_test's (with a clock it sets).

#include "services/ems/block_store.hpp"
#include "services/ems/object_store.hpp"
#include "transport/fault_injection.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace supernode;

TEST(storage_faults, disk_full_fails_ssd_writes_and_slow_store_delays_reads) {
  const fs::path dir = fs::temp_directory_path() / ("storage-fault-" + std::to_string(::getpid()));
  fs::create_directories(dir / "ssd");
  fs::create_directories(dir / "bucket");
  std::ofstream(dir / "bucket" / "object") << "0123456789";
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  transport::plane_fault_plan plan;
  plan.epoch_s = now - 1; // both windows cover the next ten minutes
  plan.storage.push_back({transport::storage_fault_kind::disk_full, "", 0, 600, 0});
  plan.storage.push_back({transport::storage_fault_kind::slow_store, "", 0, 600, 300});
  std::ofstream(dir / "plan.toml") << transport::plane_fault_plan_text(plan);
  ::setenv(transport::fault_plan_env, (dir / "plan.toml").c_str(), 1);

  services::ems::block_store_options o;
  o.dram_bytes = 1 << 16;
  o.ssd_dir = dir / "ssd";
  o.ssd_bytes = 1 << 20;
  o.huge_pages = false;
  services::ems::block_store store(o);
  const std::vector<std::byte> data(100, std::byte{7});
  const auto put = store.put("ctx", "a", data);
  EXPECT_FALSE(put.stored);
  EXPECT_NE(put.error.str().find("No space left on device"), std::string::npos) << put.error.str();
  EXPECT_FALSE(store.exists("ctx", "a"));

  services::ems::object_store bucket(dir / "bucket", 0);
  const auto started = std::chrono::steady_clock::now();
  const auto bytes = bucket.read("object", 0, 10);
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(300));
  EXPECT_EQ(bytes.size(), 10u);

  ::unsetenv(transport::fault_plan_env);
  fs::remove_all(dir);
}
