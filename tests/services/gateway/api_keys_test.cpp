// The API key table: the file format and its errors, the file mode check, constant-time lookup
// by digest, and the Bearer header.

#include "services/gateway/api_keys.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace supernode::services::gateway;

namespace {

// The message of the error `text` produces; fails the test if it parses.
std::string parse_failure(const std::string& text) {
  try {
    api_key_table::parse(text, "keys.txt");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsed: " << text;
  return "";
}

std::filesystem::path write_file(const std::string& text, std::filesystem::perms mode) {
  auto path = std::filesystem::temp_directory_path() /
              ("api-keys-test-" + std::to_string(::getpid()) + ".txt");
  std::ofstream(path) << text;
  std::filesystem::permissions(path, mode);
  return path;
}

} // namespace

TEST(api_keys, lines_give_names_and_limits) {
  const auto table = api_key_table::parse("# comment\n\n"
                                          "sk-alpha-0123456789abcdef name=alpha max_concurrent=2\n"
                                          "  sk-beta-0123456789abcdef tokens_per_minute=500  \n"
                                          "sk-gamma-0123456789abcdef\n",
                                          "keys.txt");
  ASSERT_EQ(table.entries().size(), 3u);
  EXPECT_EQ(table.entries()[0].name, "alpha");
  EXPECT_EQ(table.entries()[0].limits.max_concurrent, 2);
  EXPECT_EQ(table.entries()[0].limits.tokens_per_minute, 0);
  EXPECT_EQ(table.entries()[1].name, "key4"); // named after its line
  EXPECT_EQ(table.entries()[1].limits.tokens_per_minute, 500);
  EXPECT_EQ(table.entries()[2].name, "key5");

  const api_key_entry* beta = table.find("sk-beta-0123456789abcdef");
  ASSERT_NE(beta, nullptr);
  EXPECT_EQ(beta->name, "key4");
  EXPECT_EQ(table.find("sk-beta-0123456789abcdeF"), nullptr);
  EXPECT_EQ(table.find("sk-beta-0123456789abcde"), nullptr);
  EXPECT_EQ(table.find(""), nullptr);
  // Only digests are kept: the key's text is nowhere in the entry.
  EXPECT_EQ(beta->digest, digest_of("sk-beta-0123456789abcdef"));
}

TEST(api_keys, a_malformed_line_names_file_and_line) {
  EXPECT_NE(parse_failure("sk-0123456789abcdef\nsk-1123456789abcdef max_concurrent=x\n")
                .find("keys.txt:2: max_concurrent"),
            std::string::npos);
  EXPECT_NE(parse_failure("short\n").find("keys.txt:1: a key has at least 16"), std::string::npos);
  EXPECT_NE(parse_failure("sk-0123456789abcdef colour=red\n").find("keys.txt:1: unknown field"),
            std::string::npos);
  EXPECT_NE(parse_failure("sk-0123456789abcdef bare\n").find("keys.txt:1:"), std::string::npos);
  EXPECT_NE(parse_failure("sk-0123456789abcdef name=a\nsk-1123456789abcdef name=a\n")
                .find("keys.txt:2: the name 'a' is taken"),
            std::string::npos);
  EXPECT_NE(parse_failure("sk-0123456789abcdef\nsk-0123456789abcdef\n").find("keys.txt:2:"),
            std::string::npos);
  EXPECT_NE(parse_failure("sk-0123456789abcdef name=a{b}\n").find("keys.txt:1: name"),
            std::string::npos);
  EXPECT_NE(parse_failure("name=x sk-0123456789abcdef\n").find("keys.txt:1:"), std::string::npos);
}

TEST(api_keys, a_file_others_can_read_is_refused_naming_path_and_mode) {
  using std::filesystem::perms;
  const auto open_file =
      write_file("sk-0123456789abcdef\n",
                 perms::owner_read | perms::owner_write | perms::group_read | perms::others_read);
  try {
    api_key_table::load(open_file);
    ADD_FAILURE() << "a 0644 key file was accepted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(open_file.string()), std::string::npos) << what;
    EXPECT_NE(what.find("0644"), std::string::npos) << what;
  }
  const auto private_file =
      write_file("sk-0123456789abcdef name=mine\n", perms::owner_read | perms::owner_write);
  EXPECT_EQ(api_key_table::load(private_file).entries().at(0).name, "mine");
  std::filesystem::remove(private_file);
}

TEST(api_keys, bearer_header) {
  EXPECT_EQ(bearer_token("Bearer sk-abc"), "sk-abc");
  EXPECT_EQ(bearer_token("bearer  sk-abc "), "sk-abc");
  EXPECT_EQ(bearer_token("Basic sk-abc"), std::nullopt);
  EXPECT_EQ(bearer_token("Bearer "), std::nullopt);
  EXPECT_EQ(bearer_token("sk-abc"), std::nullopt);
}
