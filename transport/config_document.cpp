#include "transport/config_document.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <toml++/toml.h>

namespace supernode::transport {

struct config_document::impl {
  toml::table root;
};

namespace {

// "an integer", "a string": a type name as a sentence uses it.
std::string with_article(const char* name) {
  return (std::string("aeiou").find(name[0]) != std::string::npos ? "an " : "a ") +
         std::string(name);
}

std::string type_name(config_type t) {
  return with_article(config_type_name(t));
}

const char* type_name(toml::node_type t) {
  switch (t) {
  case toml::node_type::table:
    return "a table";
  case toml::node_type::array:
    return "an array";
  case toml::node_type::string:
    return "a string";
  case toml::node_type::integer:
    return "an integer";
  case toml::node_type::floating_point:
    return "a float";
  case toml::node_type::boolean:
    return "a boolean";
  case toml::node_type::date:
    return "a date";
  case toml::node_type::time:
    return "a time";
  case toml::node_type::date_time:
    return "a date-time";
  case toml::node_type::none:
    break;
  }
  return "nothing";
}

// Large powers of two read better as 2^k.
std::string integer_text(int64_t v) {
  if (v >= (int64_t{1} << 20) && std::has_single_bit(static_cast<uint64_t>(v)))
    return "2^" + std::to_string(std::countr_zero(static_cast<uint64_t>(v)));
  return std::to_string(v);
}

std::string float_text(double v) {
  char buf[32];
  auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  std::string s(buf, end);
  if (auto e = s.find("e+"); e != std::string::npos) s.erase(e + 1, 1);
  if (auto e = s.find("e0"); e != std::string::npos) s.erase(e + 1, 1);
  return s;
}

// config_value as TOML writes it.
struct toml_writer {
  std::string operator()(bool b) const { return b ? "true" : "false"; }
  std::string operator()(int64_t v) const { return std::to_string(v); }
  std::string operator()(double v) const { return float_text(v); }
  std::string operator()(const std::string& s) const { return "\"" + s + "\""; }
  template<class T>
  std::string operator()(const std::vector<T>& items) const {
    std::string s;
    for (auto& item : items) s += (s.empty() ? "" : ", ") + (*this)(item);
    return "[" + s + "]";
  }
};

// Optimal string alignment: insertions, deletions, substitutions and swaps of neighbours.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string listed(std::span<const std::string> names, const char* open, const char* close) {
  std::string s;
  for (auto& n : names) s += (s.empty() ? "" : ", ") + (open + n + close);
  return s;
}

// " (did you mean 'x'?)", else the names there are, so the message always says what would do.
std::string hint(std::string_view name, std::span<const std::string> known, const char* open,
                 const char* close) {
  const auto near = nearest_name(name, known);
  if (!near.empty()) return std::string(" (did you mean ") + open + near + close + "?)";
  if (known.empty()) return "";
  return " (known: " + listed(known, open, close) + ")";
}

// "<source>:<line of n>: [<table>] <key> <what>"
[[noreturn]] void fail_at(const std::string& source, const toml::node* n, const config_path& table,
                          std::string_view key, const std::string& what) {
  std::string message = source;
  if (n && n->source().begin.line > 0) message += ":" + std::to_string(n->source().begin.line);
  message += ": ";
  if (!table.empty()) message += "[" + table_name(table) + "] ";
  if (!key.empty()) message += std::string(key) + " ";
  throw std::runtime_error(message + what);
}

// A part of a path that indexes an array of tables ({"fault", "2"}: the third [[fault]]).
std::optional<size_t> array_index(const std::string& part) {
  if (part.empty() || part.size() > 9 ||
      !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoul(part);
}

bool is_array_of_tables(const toml::node& n) {
  const auto* a = n.as_array();
  return a && std::all_of(a->begin(), a->end(), [](const toml::node& e) { return e.is_table(); });
}

// The table at `path`, nullptr when absent; fails when something else is there.
const toml::table* find_table(const std::string& source, const toml::table& root,
                              const config_path& path) {
  const toml::table* t = &root;
  for (size_t i = 0; i < path.size(); ++i) {
    const toml::node* n = t->get(path[i]);
    if (!n) return nullptr;
    if (i + 1 < path.size() && is_array_of_tables(*n))
      if (const auto index = array_index(path[i + 1])) {
        n = n->as_array()->get(*index);
        if (!n) return nullptr;
        ++i;
      }
    if (!n->is_table()) {
      const config_path table(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(i + 1));
      fail_at(source, n, table, "", std::string("must be a table, got ") + type_name(n->type()));
    }
    t = n->as_table();
  }
  return t;
}

std::string type_mismatch(const config_key& k, const toml::node& n) {
  return std::string("must be ") + type_name(k.type) + ", got " + type_name(n.type());
}

// An item of a list key that is not of the list's item type.
std::string item_mismatch(const config_key& k, const toml::node& item) {
  return std::string("must be ") +
         (k.type == config_type::string_list ? "a string" : "an integer") + ", got " +
         type_name(item.type());
}

// The value of node `n` as key `k` of `table` reads it.
config_value value_of(const std::string& source, const config_path& table, const config_key& k,
                      const toml::node& n) {
  auto out_of_range = [&](const toml::node& at, const std::string& name, const std::string& got) {
    const std::string range = range_text(k);
    const bool interval = range[0] == '[' || range[0] == '(';
    fail_at(source, &at, table, name,
            "must be " + std::string(k.choices.empty() ? (interval ? "in " : "") : "one of ") +
                range + ", got " + got);
  };
  auto checked_integer = [&](const toml::node& item, const std::string& name) {
    if (!item.is_integer())
      fail_at(source, &item, table, name,
              &item == &n ? type_mismatch(k, n) : item_mismatch(k, item));
    const int64_t v = *item.value_exact<int64_t>();
    if (v < k.min || v > k.max) out_of_range(item, name, std::to_string(v));
    return v;
  };
  const bool list = k.type == config_type::string_list || k.type == config_type::integer_list;
  if (list && !n.is_array()) fail_at(source, &n, table, k.name, type_mismatch(k, n));
  switch (k.type) {
  case config_type::boolean:
    if (!n.is_boolean()) fail_at(source, &n, table, k.name, type_mismatch(k, n));
    return *n.value_exact<bool>();
  case config_type::integer:
    return checked_integer(n, k.name);
  case config_type::floating: {
    if (!n.is_number()) fail_at(source, &n, table, k.name, type_mismatch(k, n));
    const double v = *n.value<double>();
    const bool above = k.low_open ? v > k.low : v >= k.low;
    if (!above || !(v <= k.high)) out_of_range(n, k.name, float_text(v));
    return v;
  }
  case config_type::string: {
    if (n.is_boolean() && !k.if_true.empty())
      return *n.value_exact<bool>() ? k.if_true : k.if_false;
    if (!n.is_string()) fail_at(source, &n, table, k.name, type_mismatch(k, n));
    std::string v = *n.value_exact<std::string>();
    if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), v) == k.choices.end())
      out_of_range(n, k.name, "\"" + v + "\"");
    return v;
  }
  case config_type::string_list: {
    std::vector<std::string> items;
    for (auto& item : *n.as_array()) {
      if (!item.is_string())
        fail_at(source, &item, table, k.name + "[" + std::to_string(items.size()) + "]",
                item_mismatch(k, item));
      items.push_back(*item.value_exact<std::string>());
    }
    return items;
  }
  case config_type::integer_list: {
    std::vector<int64_t> items;
    for (auto& item : *n.as_array())
      items.push_back(checked_integer(item, k.name + "[" + std::to_string(items.size()) + "]"));
    return items;
  }
  }
  fail_at(source, &n, table, k.name, type_mismatch(k, n));
}

} // namespace

const char* config_type_name(config_type t) {
  switch (t) {
  case config_type::boolean:
    return "boolean";
  case config_type::integer:
    return "integer";
  case config_type::floating:
    return "number";
  case config_type::string:
    return "string";
  case config_type::string_list:
    return "array of strings";
  case config_type::integer_list:
    return "array of integers";
  }
  return "?";
}

std::string read_config_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot open config " + file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string table_name(const config_path& table) {
  std::string s;
  for (auto& part : table) s += (s.empty() ? "" : ".") + part;
  return s;
}

std::string range_text(const config_key& k) {
  constexpr auto int_min = std::numeric_limits<int64_t>::min();
  constexpr auto int_max = std::numeric_limits<int64_t>::max();
  switch (k.type) {
  case config_type::integer:
  case config_type::integer_list:
    if (k.min == int_min && k.max == int_max) return "";
    if (k.max == int_max) return std::string(">= ").append(integer_text(k.min));
    if (k.min == int_min) return std::string("<= ").append(integer_text(k.max));
    return std::string("[").append(integer_text(k.min)).append(", ").append(integer_text(k.max)) +
           "]";
  case config_type::floating: {
    const bool has_low = k.low > -std::numeric_limits<double>::infinity();
    const bool has_high = k.high < std::numeric_limits<double>::infinity();
    if (has_low && has_high)
      return (k.low_open ? "(" : "[") + float_text(k.low) + ", " + float_text(k.high) + "]";
    if (has_low) return (k.low_open ? "> " : ">= ") + float_text(k.low);
    if (has_high) return "<= " + float_text(k.high);
    return "";
  }
  case config_type::string: {
    std::string s;
    for (auto& c : k.choices) s += (s.empty() ? "" : ", ") + c;
    return s;
  }
  case config_type::boolean:
  case config_type::string_list:
    return "";
  }
  return "";
}

std::string toml_text(const config_value& value) {
  return std::visit(toml_writer{}, value);
}

std::string nearest_name(std::string_view name, std::span<const std::string> candidates) {
  const std::string wanted = lowercase(name);
  const size_t near_enough = std::max<size_t>(1, wanted.size() / 3);
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (auto& candidate : candidates) {
    const std::string c = lowercase(candidate);
    const size_t d = edit_distance(wanted, c);
    const bool contains = wanted.size() >= 3 && (c.find(wanted) != std::string::npos ||
                                                 wanted.find(c) != std::string::npos);
    if ((d <= near_enough || contains) && d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

config_document::config_document(std::string_view text, std::string source)
    : source_(std::move(source)) {
  auto parsed = std::make_shared<impl>();
  try {
    parsed->root = toml::parse(text, source_);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(source_ + ":" + std::to_string(e.source().begin.line) + ": " +
                             std::string(e.description()));
  }
  impl_ = std::move(parsed);
}

config_document config_document::load(const std::filesystem::path& file) {
  return config_document(read_config_file(file), file.string());
}

bool config_document::has(const config_path& table) const {
  return find_table(source_, impl_->root, table) != nullptr;
}

std::vector<std::string> config_document::subtables(const config_path& table) const {
  std::vector<std::string> names;
  if (const auto* t = find_table(source_, impl_->root, table))
    for (auto& [key, node] : *t) {
      config_path child = table;
      child.emplace_back(key.str());
      if (!node.is_table())
        fail_at(source_, &node, child, "",
                std::string("must be a table, got ") + type_name(node.type()));
      names.emplace_back(key.str());
    }
  return names;
}

void config_document::read_table(const config_path& table, std::span<const config_key> keys,
                                 std::span<const std::string> subtables,
                                 const std::function<void(size_t, config_value)>& set) const {
  const toml::table* t = find_table(source_, impl_->root, table);
  if (t)
    for (auto& [key, node] : *t) {
      const std::string name(key.str());
      if (std::any_of(keys.begin(), keys.end(), [&](auto& k) { return k.name == name; })) continue;
      if (node.is_table()) {
        if (std::find(subtables.begin(), subtables.end(), name) != subtables.end()) continue;
        std::vector<std::string> known;
        for (auto& s : subtables) known.push_back(table_name(table) + "." + s);
        const std::string full = table_name(table) + "." + name;
        fail_at(source_, &node, {}, "",
                "unknown table [" + full + "]" + hint(full, known, "[", "]"));
      }
      std::vector<std::string> known;
      for (auto& k : keys) known.push_back(k.name);
      fail_at(source_, &node, table, "",
              "unknown key '" + name + "'" + hint(name, known, "'", "'"));
    }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (const toml::node* n = t ? t->get(keys[i].name) : nullptr)
      set(i, value_of(source_, table, keys[i], *n));
    else if (keys[i].required)
      fail_at(source_, t, table, keys[i].name,
              std::string("is required (") + type_name(keys[i].type) +
                  (keys[i].choices.empty() ? "" : ": " + range_text(keys[i])) + ")");
  }
}

void config_document::read_entries(
    const config_path& table, const config_key& value,
    const std::function<void(const std::string&, config_value)>& set) const {
  if (const toml::table* t = find_table(source_, impl_->root, table))
    for (auto& [key, node] : *t) {
      config_key k = value;
      k.name = std::string(key.str());
      set(k.name, value_of(source_, table, k, node));
    }
}

size_t config_document::table_count(const config_path& array) const {
  if (array.empty()) return 0;
  const config_path parent(array.begin(), array.end() - 1);
  const toml::table* t = find_table(source_, impl_->root, parent);
  const toml::node* n = t ? t->get(array.back()) : nullptr;
  if (!n) return 0;
  if (!is_array_of_tables(*n))
    fail_at(source_, n, {}, "",
            "[[" + table_name(array) + "]] must be an array of tables, got " +
                type_name(n->type()));
  return n->as_array()->size();
}

void config_document::check_tables(std::span<const std::string> known) const {
  for (auto& [key, node] : impl_->root) {
    const std::string name(key.str());
    if (!node.is_table() &&
        !(node.is_array() && is_array_of_tables(node) && !node.as_array()->empty()))
      fail_at(source_, &node, {}, "",
              "key '" + name + "' is outside any table (tables: " + listed(known, "[", "]") + ")");
    if (std::find(known.begin(), known.end(), name) == known.end())
      fail_at(source_, &node, {}, "", "unknown table [" + name + "]" + hint(name, known, "[", "]"));
  }
}

void config_document::fail(const config_path& table, std::string_view key,
                           const std::string& what) const {
  // The line of the key, else of the deepest part of the table the file has.
  const toml::node* at = &impl_->root;
  for (auto& part : table) {
    auto* t = at->as_table();
    if (!t || !t->get(part)) break;
    at = t->get(part);
  }
  if (auto* t = at->as_table(); t && !key.empty() && t->get(key)) at = t->get(key);
  fail_at(source_, at, table, key, what);
}

} // namespace supernode::transport
