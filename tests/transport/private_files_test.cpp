// Private folders and files: created 0700 / 0600; a folder another user owns or anyone may write
// is refused naming its path, owner and mode; cluster key pairs made once per instance, found
// by their public key, and malformed ones refused naming the file.

#include "transport/cluster_keys.hpp"
#include "transport/private_files.hpp"

#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace supernode::transport;
namespace fs = std::filesystem;

namespace {

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

struct scratch {
  fs::path root =
      fs::temp_directory_path() / ("sn-private-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  scratch() { fs::remove_all(root); }
  ~scratch() { fs::remove_all(root); }
};

std::string refusal(const fs::path& dir) {
  try {
    ensure_private_dir(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(private_files, folders_are_made_0700_and_files_0600) {
  scratch s;
  const auto dir = s.root / "a" / "b";
  ensure_private_dir(dir);
  EXPECT_EQ(mode_of(s.root / "a"), 0700u);
  EXPECT_EQ(mode_of(dir), 0700u);
  write_private_file(dir / "f", "one");
  EXPECT_EQ(mode_of(dir / "f"), 0600u);
  EXPECT_TRUE(create_private_file(dir / "g", "first"));
  EXPECT_FALSE(create_private_file(dir / "g", "second"));
  std::ifstream in(dir / "g");
  std::string text;
  in >> text;
  EXPECT_EQ(text, "first");
  // An existing file opened for writing is made private too.
  { std::ofstream(dir / "h") << "x"; }
  ::chmod((dir / "h").c_str(), 0644);
  ::close(open_private_file(dir / "h", O_APPEND));
  EXPECT_EQ(mode_of(dir / "h"), 0600u);
  // No temporaries left behind.
  int entries = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 3);
}

TEST(private_files, a_world_writable_folder_is_refused_naming_path_and_mode) {
  scratch s;
  fs::create_directories(s.root);
  ::chmod(s.root.c_str(), 0777);
  const auto why = refusal(s.root);
  EXPECT_NE(why.find(s.root.string()), std::string::npos) << why;
  EXPECT_NE(why.find("0777"), std::string::npos) << why;
  // A group-readable folder of ours is fine, and tightened.
  ::chmod(s.root.c_str(), 0750);
  EXPECT_EQ(refusal(s.root), "");
  EXPECT_EQ(mode_of(s.root), 0700u);
}

TEST(private_files, a_folder_of_another_user_is_refused_naming_its_owner) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a folder to another user";
  const passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  scratch s;
  fs::create_directories(s.root);
  ::chmod(s.root.c_str(), 0700);
  ASSERT_EQ(::chown(s.root.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  const auto why = refusal(s.root);
  EXPECT_NE(why.find("nobody"), std::string::npos) << why;
  EXPECT_NE(why.find(s.root.string()), std::string::npos) << why;
}

TEST(cluster_keys, one_pair_per_instance_found_by_its_public_key) {
  scratch s;
  cluster_keys keys(s.root / "keys");
  EXPECT_EQ(keys.ensure({"decode-0", "prefill-0"}).size(), 2u);
  EXPECT_TRUE(keys.ensure({"decode-0", "prefill-0"}).empty()); // already there
  EXPECT_EQ(mode_of(s.root / "keys"), 0700u);
  EXPECT_EQ(mode_of(s.root / "keys" / "decode-0.secret"), 0600u);
  EXPECT_EQ(mode_of(s.root / "keys" / "decode-0.public"), 0600u);

  const auto decode = keys.own("decode-0");
  EXPECT_EQ(decode.public_key.size(), 40u);
  EXPECT_EQ(keys.public_key("decode-0"), decode.public_key);
  EXPECT_NE(keys.own("prefill-0").public_key, decode.public_key);
  EXPECT_EQ(keys.owner_of(decode.public_key), "decode-0");
  EXPECT_EQ(keys.owner_of(make_curve_keypair().public_key), std::nullopt);
  auto binary = binary_of_z85_key(decode.public_key);
  ASSERT_TRUE(binary);
  EXPECT_EQ(z85_of_binary_key(*binary), decode.public_key);
  EXPECT_EQ(z85_of_binary_key("short"), std::nullopt);

  // Another reader of the same folder sees the same keys.
  cluster_keys other(s.root / "keys");
  EXPECT_EQ(other.owner_of(decode.public_key), "decode-0");
}

TEST(cluster_keys, a_pair_written_after_a_lookup_is_found_at_once_and_a_replaced_key_names_nobody) {
  scratch s;
  cluster_keys keys(s.root / "keys");
  keys.ensure({"decode-0"});
  const auto old_key = keys.own("decode-0").public_key;
  EXPECT_EQ(keys.owner_of(old_key), "decode-0");
  // An instance that joins makes its pair now: its first handshake must not be refused.
  keys.ensure({"decode-2"});
  EXPECT_EQ(keys.owner_of(keys.own("decode-2").public_key), "decode-2");
  // decode-0's pair is replaced (a new cluster in the same folder): the old key is nobody's.
  std::filesystem::remove(s.root / "keys" / "decode-0.public");
  std::filesystem::remove(s.root / "keys" / "decode-0.secret");
  keys.ensure({"decode-0"});
  EXPECT_EQ(keys.owner_of(keys.own("decode-0").public_key), "decode-0");
  EXPECT_EQ(keys.owner_of(old_key), std::nullopt);
}

TEST(cluster_keys, processes_racing_converge_on_one_pair) {
  scratch s;
  std::vector<std::thread> racers;
  for (int i = 0; i < 4; ++i)
    racers.emplace_back([&] { cluster_keys(s.root / "keys").ensure({"gateway-0", "decode-0"}); });
  for (auto& t : racers) t.join();
  cluster_keys keys(s.root / "keys");
  const auto pair = keys.own("gateway-0");
  EXPECT_EQ(keys.public_key("gateway-0"), pair.public_key);
}

TEST(cluster_keys, a_secret_whose_public_half_is_not_written_yet_gets_it) {
  // What a process racing another sees between the winner's secret and its public file.
  scratch s;
  cluster_keys keys(s.root / "keys");
  keys.ensure({"decode-0"});
  const auto pair = keys.own("decode-0");
  std::filesystem::remove(s.root / "keys" / "decode-0.public");
  EXPECT_TRUE(keys.ensure({"decode-0"}).empty());
  EXPECT_EQ(keys.public_key("decode-0"), pair.public_key);
  EXPECT_EQ(mode_of(s.root / "keys" / "decode-0.public"), 0600u);
}

TEST(cluster_keys, a_missing_or_malformed_key_is_refused_naming_the_file) {
  scratch s;
  cluster_keys keys(s.root / "keys");
  keys.ensure({"decode-0"});
  try {
    keys.own("decode-1");
    FAIL() << "a missing key was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("decode-1.secret"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("supernode cluster keys"), std::string::npos) << e.what();
  }
  write_private_file(s.root / "keys" / "decode-0.secret", "public = \"abc\"\n");
  EXPECT_THROW(keys.own("decode-0"), std::runtime_error);
}
