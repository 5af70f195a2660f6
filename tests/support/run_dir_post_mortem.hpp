#pragma once
// What a failed cluster test prints before its run folder goes: the supervisor's events and
// the end of every process's log. A failure that shows only under load (two cores shared with
// other tests) rarely comes back when run alone, and the folder is removed with the test, so
// the test's own output is where its story has to be.

#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>

namespace supernode::testing {

// The last `lines` lines of `file`, under a line naming it.
inline void print_tail(const std::filesystem::path& file, size_t lines, std::ostream& out) {
  std::ifstream in(file);
  std::deque<std::string> tail;
  size_t total = 0;
  for (std::string line; std::getline(in, line); ++total) {
    tail.push_back(std::move(line));
    if (tail.size() > lines) tail.pop_front();
  }
  out << "---- " << file.filename().string() << " (" << total << (total == 1 ? " line" : " lines");
  if (total > tail.size()) out << ", the last " << tail.size();
  out << ")\n";
  for (auto& line : tail) out << "  " << line << '\n';
}

inline void print_run_dir_post_mortem(const std::filesystem::path& run_dir,
                                      std::ostream& out = std::cout) {
  namespace fs = std::filesystem;
  out << "==== post-mortem of " << run_dir.string() << '\n';
  if (const auto events = run_dir / "events.jsonl"; fs::exists(events))
    print_tail(events, 200, out);
  std::error_code ec;
  std::set<fs::path> logs; // in name order
  for (const auto& entry : fs::directory_iterator(run_dir / "logs", ec))
    if (entry.path().extension() == ".log") logs.insert(entry.path());
  for (const auto& log : logs) print_tail(log, 60, out);
  out << "==== end of post-mortem" << std::endl;
}

} // namespace supernode::testing
