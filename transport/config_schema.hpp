#pragma once
// A config table declared once: its keys (name, type, range, one-line meaning) bound to the
// members of the struct that holds them. The same declaration reads a file (config_document
// checks every entry against it) and documents it (config_reference_markdown, which
// docs/configuration.md is checked against); the defaults it documents are the members'
// initialisers, read from a default-constructed struct, so they cannot drift either.
//
//   static const auto decode = config_table<serving_config>("decode", "each decode instance")
//       .integer("max_batch", &serving_config::decode_max_batch, 1, 4096, "sequences per step")
//       .integer("kv_blocks", &serving_config::decode_kv_blocks, 1, 1 << 24, "its KV pool");
//   decode.read(document, config);
//
// Conditions no range can say (a multiple of another key, required when another key is set)
// are checked by the reader after reading, and declared with rule() so the docs say them too.

#include "transport/config_document.hpp"

#include <concepts>
#include <utility>

namespace supernode::transport {

struct config_key_doc {
  std::string name, type;
  std::string default_value; // Markdown: `16` for a value, prose for a documented default
  std::string range, meaning;
};

struct config_table_doc {
  std::string name; // as written in the file: "decode", "planes.<name>"
  std::string meaning;
  std::vector<config_key_doc> keys;
};

// How a key is documented, given its default as TOML text (key.default_text wins over it).
config_key_doc document_key(const config_key& key, const std::string& default_value);
// The tables as Markdown: a heading, the meaning and a table of keys for each.
std::string config_reference_markdown(std::span<const config_table_doc> tables);

template<class Config>
class config_table {
public:
  using setter = std::function<void(Config&, config_value)>;
  using getter = std::function<config_value(const Config&)>;

  // `name` is the table's header as documented: "decode", or "planes.<name>" for a family of
  // tables the reader reads one by one with read(document, {"planes", name}, config).
  config_table(std::string name, std::string meaning)
      : name_(std::move(name)), meaning_(std::move(meaning)) {}

  template<class M> // an integral member, or a std::chrono::duration counted in the key's unit
  config_table& integer(std::string name, M Config::*field, int64_t min, int64_t max,
                        std::string meaning) {
    config_key k{std::move(name), config_type::integer, std::move(meaning)};
    k.min = min;
    k.max = max;
    return add(
        std::move(k), [field](Config& c, config_value v) { c.*field = M(std::get<int64_t>(v)); },
        [field](const Config& c) -> config_value { return count_of(c.*field); });
  }
  config_table& floating(std::string name, double Config::*field, double low, double high,
                         std::string meaning) {
    config_key k{std::move(name), config_type::floating, std::move(meaning)};
    k.low = low;
    k.high = high;
    return bind<double>(std::move(k), field);
  }
  config_table& boolean(std::string name, bool Config::*field, std::string meaning) {
    return bind<bool>({std::move(name), config_type::boolean, std::move(meaning)}, field);
  }
  template<class M> // std::string or std::filesystem::path
  config_table& string(std::string name, M Config::*field, std::string meaning) {
    return bind<std::string>({std::move(name), config_type::string, std::move(meaning)}, field);
  }
  config_table& strings(std::string name, std::vector<std::string> Config::*field,
                        std::string meaning) {
    return bind<std::vector<std::string>>(
        {std::move(name), config_type::string_list, std::move(meaning)}, field);
  }
  config_table& integers(std::string name, std::vector<int> Config::*field, int64_t min,
                         int64_t max, std::string meaning) {
    config_key k{std::move(name), config_type::integer_list, std::move(meaning)};
    k.min = min;
    k.max = max;
    return add(
        std::move(k),
        [field](Config& c, config_value v) {
          auto& items = std::get<std::vector<int64_t>>(v);
          c.*field = std::vector<int>(items.begin(), items.end());
        },
        [field](const Config& c) -> config_value {
          return std::vector<int64_t>((c.*field).begin(), (c.*field).end());
        });
  }
  // A string naming one of a few values of the member (an enum, a flag): `names` pairs each
  // string the file may hold with the value it stands for.
  template<class M>
  config_table& enumerated(std::string name, M Config::*field,
                           std::vector<std::pair<std::string, M>> names, std::string meaning) {
    config_key k{std::move(name), config_type::string, std::move(meaning)};
    for (auto& [text, value] : names) k.choices.push_back(text);
    return add(
        std::move(k),
        [field, names](Config& c, config_value v) {
          for (auto& [text, value] : names)
            if (text == std::get<std::string>(v)) c.*field = value;
        },
        [field, names](const Config& c) -> config_value {
          for (auto& [text, value] : names)
            if (c.*field == value) return text;
          return std::string();
        });
  }
  // A key whose member is not the value as written: `key` says what the file may hold, `set`
  // and `get` convert.
  config_table& custom(config_key key, setter set, getter get) {
    return add(std::move(key), std::move(set), std::move(get));
  }

  // Modifiers of the key declared last.
  config_table& required() { return last().required = true, *this; }
  config_table& choices(std::vector<std::string> allowed) {
    return last().choices = std::move(allowed), *this;
  }
  // The enumerated key declared last also reads true and false, as these two of its values.
  config_table& booleans_as(std::string if_false, std::string if_true) {
    last().if_false = std::move(if_false);
    last().if_true = std::move(if_true);
    return *this;
  }
  config_table& excluding_low() { return last().low_open = true, *this; }
  config_table& rule(std::string text) { return last().rule = std::move(text), *this; }
  config_table& documented_default(std::string text) {
    return last().default_text = std::move(text), *this;
  }

  // [<name>.<sub>] may follow; another reader reads it.
  config_table& subtable(std::string sub) { return subtables_.push_back(std::move(sub)), *this; }

  const std::string& name() const { return name_; }
  void read(const config_document& doc, Config& c) const { read(doc, {name_}, c); }
  void read(const config_document& doc, const config_path& table, Config& c) const {
    doc.read_table(table, keys_, subtables_,
                   [&](size_t i, config_value v) { setters_[i](c, std::move(v)); });
  }

  config_table_doc document() const {
    const Config defaults{};
    config_table_doc d{name_, meaning_, {}};
    for (size_t i = 0; i < keys_.size(); ++i)
      d.keys.push_back(document_key(keys_[i], toml_text(getters_[i](defaults))));
    return d;
  }

private:
  template<class M>
  static int64_t count_of(const M& v) {
    if constexpr (requires { v.count(); })
      return static_cast<int64_t>(v.count());
    else
      return static_cast<int64_t>(v);
  }
  // A member that holds the value as the file writes it: V, the config_value alternative of the
  // key's type, converts to and from M.
  template<class V, class M>
  config_table& bind(config_key key, M Config::*field) {
    return add(
        std::move(key),
        [field](Config& c, config_value v) { c.*field = std::get<V>(std::move(v)); },
        [field](const Config& c) -> config_value { return V(c.*field); });
  }
  config_table& add(config_key key, setter set, getter get) {
    keys_.push_back(std::move(key));
    setters_.push_back(std::move(set));
    getters_.push_back(std::move(get));
    return *this;
  }
  config_key& last() { return keys_.back(); }

  std::string name_, meaning_;
  std::vector<config_key> keys_;
  std::vector<setter> setters_;
  std::vector<getter> getters_;
  std::vector<std::string> subtables_;
};

} // namespace supernode::transport
