#include "transport/config_schema.hpp"

namespace supernode::transport {

namespace {

// A Markdown table cell: no '|' and no line break inside.
std::string cell(const std::string& text) {
  std::string s;
  for (char c : text) {
    if (c == '|')
      s += "\\|";
    else
      s += c == '\n' ? ' ' : c;
  }
  return s;
}

} // namespace

config_key_doc document_key(const config_key& key, const std::string& default_value) {
  std::string range = range_text(key);
  if (key.type == config_type::integer_list && !range.empty()) range = "each in " + range;
  if (key.required) range = range.empty() ? "required" : "required; " + range;
  if (!key.rule.empty()) range += (range.empty() ? "" : "; ") + key.rule;
  // A TOML default in code style; a documented one is prose ("<run_dir>/ems/<instance>").
  std::string shown = key.default_text.empty() ? "`" + default_value + "`" : key.default_text;
  if (key.required) shown = "none";
  return {key.name, config_type_name(key.type), shown, range, key.meaning};
}

std::string config_reference_markdown(std::span<const config_table_doc> tables) {
  std::string out;
  for (auto& t : tables) {
    out += "### `[" + t.name + "]`\n\n" + t.meaning + "\n\n";
    out += "| Key | Type | Default | Range | Meaning |\n|---|---|---|---|---|\n";
    for (auto& k : t.keys)
      out += "| `" + cell(k.name) + "` | " + cell(k.type) + " | " + cell(k.default_value) + " | " +
             cell(k.range) + " | " + cell(k.meaning) + " |\n";
    out += "\n";
  }
  return out;
}

} // namespace supernode::transport
