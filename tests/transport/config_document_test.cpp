// The strict reading every config table shares: each failure kind names the file, the line,
// the table and the key; an unknown key or table gets the nearest known name.

#include "transport/config_schema.hpp"

#include <chrono>
#include <gtest/gtest.h>

using namespace supernode::transport;

namespace {

struct pump_config {
  int64_t rate = 16;
  std::chrono::milliseconds period{250};
  double duty = 0.5;
  bool enabled = true;
  std::string mode = "fast";
  std::filesystem::path log_dir;
  std::vector<std::string> names;
  std::vector<int> slots = {1, 2};
};

const config_table<pump_config>& pump_table() {
  static const auto table = config_table<pump_config>("pump", "A pump.")
                                .integer("rate", &pump_config::rate, 1, 4096, "strokes per step")
                                .integer("period_ms", &pump_config::period, 1, 60000, "a step")
                                .floating("duty", &pump_config::duty, 0.0, 1.0, "share | on")
                                .excluding_low()
                                .boolean("enabled", &pump_config::enabled, "runs at all")
                                .string("mode", &pump_config::mode, "how it runs")
                                .choices({"fast", "slow"})
                                .string("log_dir", &pump_config::log_dir, "where it logs")
                                .documented_default("`<run_dir>/pump`")
                                .strings("names", &pump_config::names, "what it is called")
                                .integers("slots", &pump_config::slots, 0, 7, "where it sits")
                                .rule("no slot twice")
                                .subtable("valves");
  return table;
}

pump_config read(const std::string& text) {
  pump_config c;
  pump_table().read(config_document(text, "pump.toml"), c);
  return c;
}

// The message a bad file fails with; empty when it does not fail.
std::string error_of(const std::string& text) {
  try {
    read(text);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(config_document, reads_every_type_and_keeps_defaults_of_absent_keys) {
  auto c = read("[pump]\nrate = 32\nperiod_ms = 100\nduty = 1\nenabled = false\nmode = \"slow\"\n"
                "names = [\"a\", \"b\"]\nslots = []\n[pump.valves]\nanything = 1\n");
  EXPECT_EQ(c.rate, 32);
  EXPECT_EQ(c.period, std::chrono::milliseconds(100));
  EXPECT_EQ(c.duty, 1.0); // an integer is a fine number
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.mode, "slow");
  EXPECT_EQ(c.names, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(c.slots.empty());
  EXPECT_EQ(c.log_dir, ""); // absent: the member's initialiser

  auto defaults = read("");
  EXPECT_EQ(defaults.rate, 16);
  EXPECT_EQ(defaults.slots, (std::vector<int>{1, 2}));
}

TEST(config_document, an_unknown_key_names_file_line_table_and_the_nearest_key) {
  EXPECT_EQ(error_of("[pump]\nrate = 2\nrat = 3\n"),
            "pump.toml:3: [pump] unknown key 'rat' (did you mean 'rate'?)");
  // A swap of neighbours is one edit, case does not count, a contained name is near.
  EXPECT_NE(error_of("[pump]\nmdoe = \"fast\"\n").find("(did you mean 'mode'?)"),
            std::string::npos);
  EXPECT_NE(error_of("[pump]\nDuty = 0.3\n").find("(did you mean 'duty'?)"), std::string::npos);
  EXPECT_NE(error_of("[pump]\nperiod = 3\n").find("(did you mean 'period_ms'?)"),
            std::string::npos);
  // Nothing near: the message lists the keys there are.
  EXPECT_EQ(error_of("[pump]\nvolume = 1\n"),
            "pump.toml:2: [pump] unknown key 'volume' (known: 'rate', 'period_ms', 'duty', "
            "'enabled', 'mode', 'log_dir', 'names', 'slots')");
  // A table where only keys are declared.
  EXPECT_EQ(error_of("[pump.valvs]\nx = 1\n"),
            "pump.toml:1: unknown table [pump.valvs] (did you mean [pump.valves]?)");
}

TEST(config_document, a_wrong_type_names_what_was_expected_and_found) {
  EXPECT_EQ(error_of("[pump]\nrate = \"high\"\n"),
            "pump.toml:2: [pump] rate must be an integer, got a string");
  EXPECT_EQ(error_of("[pump]\nrate = 2.5\n"),
            "pump.toml:2: [pump] rate must be an integer, got a float");
  EXPECT_EQ(error_of("[pump]\nenabled = \"yes\"\n"),
            "pump.toml:2: [pump] enabled must be a boolean, got a string");
  EXPECT_EQ(error_of("[pump]\nduty = true\n"),
            "pump.toml:2: [pump] duty must be a number, got a boolean");
  EXPECT_EQ(error_of("[pump]\nnames = \"a\"\n"),
            "pump.toml:2: [pump] names must be an array of strings, got a string");
  EXPECT_EQ(error_of("[pump]\nnames = [\"a\", 1]\n"),
            "pump.toml:2: [pump] names[1] must be a string, got an integer");
  EXPECT_EQ(error_of("[pump]\nslots = [1, \"2\"]\n"),
            "pump.toml:2: [pump] slots[1] must be an integer, got a string");
  EXPECT_EQ(error_of("pump = 3\n"), "pump.toml:1: [pump] must be a table, got an integer");
}

TEST(config_document, a_value_out_of_range_names_the_range) {
  EXPECT_EQ(error_of("[pump]\nrate = 0\n"), "pump.toml:2: [pump] rate must be in [1, 4096], got 0");
  EXPECT_EQ(error_of("\n[pump]\nperiod_ms = 60001\n"),
            "pump.toml:3: [pump] period_ms must be in [1, 60000], got 60001");
  EXPECT_EQ(error_of("[pump]\nduty = 0\n"), "pump.toml:2: [pump] duty must be in (0, 1], got 0");
  EXPECT_EQ(error_of("[pump]\nduty = 1.5\n"),
            "pump.toml:2: [pump] duty must be in (0, 1], got 1.5");
  EXPECT_EQ(error_of("[pump]\nmode = \"medium\"\n"),
            "pump.toml:2: [pump] mode must be one of fast, slow, got \"medium\"");
  EXPECT_EQ(error_of("[pump]\nslots = [3, 9]\n"),
            "pump.toml:2: [pump] slots[1] must be in [0, 7], got 9");
}

TEST(config_document, required_keys_unknown_tables_and_syntax_errors) {
  std::vector<config_key> keys{config_key("kind", config_type::string, "what it is")};
  keys[0].required = true;
  const config_document doc("[tank.a]\nsize = 1\n[tank.b]\nkind = \"x\"\n[tnak]\n", "tanks.toml");
  EXPECT_EQ(doc.subtables({"tank"}), (std::vector<std::string>{"a", "b"}));
  size_t reads = 0;
  auto set = [&](size_t, config_value) { ++reads; };
  EXPECT_NO_THROW(doc.read_table({"tank", "b"}, keys, {}, set));
  EXPECT_EQ(reads, 1u);
  try {
    doc.read_table({"tank", "a"}, keys, {}, set);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "tanks.toml:2: [tank.a] unknown key 'size' (known: 'kind')");
  }
  keys.emplace_back("size", config_type::integer, "how big");
  try {
    doc.read_table({"tank", "a"}, keys, {}, set);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "tanks.toml:1: [tank.a] kind is required (a string)");
  }

  const std::vector<std::string> known{"tank", "pump"};
  try {
    doc.check_tables(known);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "tanks.toml:5: unknown table [tnak] (did you mean [tank]?)");
  }
  EXPECT_THROW(config_document("name = 1\n", "x.toml").check_tables(known), std::runtime_error);
  try {
    config_document("[pump\nrate = 1\n", "broken.toml");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("broken.toml:1: ", 0), 0u) << e.what();
  }
}

TEST(config_document, an_array_of_tables_is_read_one_table_at_a_time) {
  const config_document doc("[[step]]\nrate = 2\n\n[[step]]\nrate = 0\n", "steps.toml");
  const std::vector<std::string> known{"step"};
  doc.check_tables(known); // an array of tables under a known name is a table
  ASSERT_EQ(doc.table_count({"step"}), 2u);
  EXPECT_EQ(doc.table_count({"absent"}), 0u);
  config_key rate("rate", config_type::integer, "strokes");
  rate.min = 1;
  const std::vector<config_key> keys{rate};
  int64_t first = 0;
  doc.read_table({"step", "0"}, keys, {},
                 [&](size_t, const config_value& v) { first = std::get<int64_t>(v); });
  EXPECT_EQ(first, 2);
  try {
    doc.read_table({"step", "1"}, keys, {}, [](size_t, const config_value&) {});
    FAIL() << "accepted rate = 0";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "steps.toml:5: [step.1] rate must be >= 1, got 0");
  }
  EXPECT_FALSE(doc.has({"step", "2"}));
  EXPECT_THROW(config_document("step = 1\n", "x.toml").table_count({"step"}), std::runtime_error);
}

TEST(config_document, nearest_name_suggests_only_likely_misspellings) {
  const std::vector<std::string> keys{"max_batch", "kv_blocks", "max_context"};
  EXPECT_EQ(nearest_name("max_bach", keys), "max_batch");
  EXPECT_EQ(nearest_name("max_bacth", keys), "max_batch");
  EXPECT_EQ(nearest_name("KV_BLOCKS", keys), "kv_blocks");
  EXPECT_EQ(nearest_name("blocks", keys), "kv_blocks");
  EXPECT_EQ(nearest_name("max_contxt", keys), "max_context");
  EXPECT_EQ(nearest_name("temperature", keys), "");
  EXPECT_EQ(nearest_name("ab", keys), "");
  // Ties go to the earlier candidate.
  const std::vector<std::string> tied{"port", "post"};
  EXPECT_EQ(nearest_name("post_", tied), "post");
  EXPECT_EQ(nearest_name("pot", tied), "port");
}

TEST(config_schema, documents_each_key_with_its_default_from_the_struct) {
  const auto doc = pump_table().document();
  EXPECT_EQ(doc.name, "pump");
  ASSERT_EQ(doc.keys.size(), 8u);
  EXPECT_EQ(doc.keys[0].default_value, "`16`");
  EXPECT_EQ(doc.keys[0].range, "[1, 4096]");
  EXPECT_EQ(doc.keys[1].default_value, "`250`"); // a duration counts the key's unit
  EXPECT_EQ(doc.keys[2].range, "(0, 1]");
  EXPECT_EQ(doc.keys[3].type, "boolean");
  EXPECT_EQ(doc.keys[4].range, "fast, slow");
  EXPECT_EQ(doc.keys[5].default_value, "`<run_dir>/pump`");
  EXPECT_EQ(doc.keys[7].default_value, "`[1, 2]`");
  EXPECT_EQ(doc.keys[7].range, "each in [0, 7]; no slot twice");

  const std::vector<config_table_doc> tables{doc};
  const auto markdown = config_reference_markdown(tables);
  EXPECT_NE(markdown.find("### `[pump]`\n\nA pump.\n"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| `duty` | number | `0.5` | (0, 1] | share \\| on |"), std::string::npos)
      << markdown;
}
