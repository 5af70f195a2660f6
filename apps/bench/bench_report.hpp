#pragma once
// How the benchmarks hand out their reports: the JSON on stdout (nothing else goes there), the
// same text in a file when asked, plots and other files written or a clear error.

#include <filesystem>
#include <optional>
#include <string>

namespace supernode::apps {

// Writes `text` to `file`; throws std::runtime_error naming the file when it cannot.
void write_text_file(const std::filesystem::path& file, const std::string& text);

// `text` on stdout (flushed, before any later stderr line), and into `file` when given.
void emit_report(const std::string& text, const std::optional<std::string>& file);

} // namespace supernode::apps
