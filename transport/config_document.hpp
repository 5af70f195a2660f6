#pragma once
// A config file parsed once, and the checks every reader of it shares. Readers (cluster_config
// for the topology, services' serving_config for the rest) take their tables from the same
// document and check each against the keys they declare (config_schema.hpp), so a file is
// strict wherever it is read:
//
//   configs/x.toml:31: [decode] unknown key 'max_bach' (did you mean 'max_batch'?)
//   configs/x.toml:31: [decode] max_batch must be an integer, got a string
//   configs/x.toml:31: [decode] max_batch must be in [1, 4096], got 0
//   configs/x.toml:30: unknown table [decod] (did you mean [decode]?)
//
// toml++ stays inside config_document.cpp: readers see typed values only.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace supernode::transport {

enum class config_type : uint8_t { boolean, integer, floating, string, string_list, integer_list };
// "boolean", "integer", "number", "string", "array of strings", "array of integers".
const char* config_type_name(config_type t);

// A value as read from a file: alternative i holds the value of config_type i.
using config_value = std::variant<bool, int64_t, double, std::string, std::vector<std::string>,
                                  std::vector<int64_t>>;

// A key of a table: what the reader accepts and what the documentation says about it.
struct config_key {
  config_key(std::string name, config_type type, std::string meaning)
      : name(std::move(name)), type(type), meaning(std::move(meaning)) {}

  std::string name;
  config_type type = config_type::string;
  std::string meaning; // one line, for docs/configuration.md
  // integer (and every item of an integer_list): inclusive bounds.
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();
  // floating: bounds; low excluded when low_open.
  double low = -std::numeric_limits<double>::infinity();
  double high = std::numeric_limits<double>::infinity();
  bool low_open = false;
  std::vector<std::string> choices; // string: the values allowed; empty: any
  // string with choices: what a boolean reads as (a flag that grew values keeps its old form).
  std::string if_false, if_true;
  bool required = false;
  std::string rule;         // a condition the range cannot say, checked after reading; for docs
  std::string default_text; // the default as documented when the member's initialiser is not it
};

// The text of a config file; throws std::runtime_error naming the file when it cannot be read.
std::string read_config_file(const std::filesystem::path& file);

// A table's place in the file: {"planes", "vpc"} is [planes.vpc].
using config_path = std::vector<std::string>;
std::string table_name(const config_path& table);

// What a key accepts, as messages and docs write it: "[1, 4096]", "(0, 1]", ">= 0",
// "ub, vpc" (the choices); empty when any value of its type is.
std::string range_text(const config_key& key);
// A value as TOML writes it: 16, 0.9, 2.5e9, true, "ub", ["decode"].
std::string toml_text(const config_value& value);

class config_document {
public:
  // Parses once; throws std::runtime_error "<source>:<line>: <reason>" on a syntax error.
  config_document(std::string_view toml_text, std::string source);
  static config_document load(const std::filesystem::path& file);

  const std::string& source() const { return source_; }
  bool has(const config_path& table) const;
  // The names of the tables under `table` ([planes.<name>]); fails on an entry of `table` that
  // is not a table.
  std::vector<std::string> subtables(const config_path& table) const;

  // Checks `table` (absent: empty) against `keys`: an entry `keys` does not name fails (one
  // naming a table is allowed when `subtables` lists it), as does a value of another type or out
  // of range and a missing required key. Then calls set(i, value) for each key i present, in the
  // order of `keys`.
  void read_table(const config_path& table, std::span<const config_key> keys,
                  std::span<const std::string> subtables,
                  const std::function<void(size_t, config_value)>& set) const;
  // A table whose keys are names the user chooses ([ems.quotas]): each value checked against
  // `value`, then passed to set(name, value) in name order.
  void read_entries(const config_path& table, const config_key& value,
                    const std::function<void(const std::string&, config_value)>& set) const;
  // The tables of an array of tables ([[fault]] ... [[fault]]): {"fault", "0"} is the first,
  // for read_table(). 0 when absent; fails when `array` is something else.
  size_t table_count(const config_path& array) const;
  // Fails on a top-level table (or array of tables) `known` does not name (suggesting the nearest)
  // and on a key outside any table.
  void check_tables(std::span<const std::string> known) const;

  // Throws std::runtime_error "<source>:<line of key>: [<table>] <key> <what>"; with an empty
  // key, "<source>:<line>: [<table>] <what>".
  [[noreturn]] void fail(const config_path& table, std::string_view key,
                         const std::string& what) const;

private:
  struct impl;
  std::string source_;
  std::shared_ptr<const impl> impl_;
};

// The candidate nearest to `name` (edit distance, a swap of neighbours counting as one edit,
// ignoring case; or a candidate containing `name`, or contained in it), when near enough to be
// a likely misspelling of it; empty otherwise. Ties go to the earlier candidate.
std::string nearest_name(std::string_view name, std::span<const std::string> candidates);

} // namespace supernode::transport
