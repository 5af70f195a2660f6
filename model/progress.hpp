#pragma once
// A one-line progress bar on stderr for long model makes and loads; silent when disabled, and
// plain occasional lines when stderr is not a terminal (logs stay readable).

#include <chrono>
#include <cstdint>
#include <string>

namespace supernode::model {

class progress_bar {
public:
  progress_bar(std::string label, uint64_t total, bool enabled);
  ~progress_bar();
  void advance(uint64_t amount);
  void finish();

private:
  void draw(bool final);
  std::string label_;
  uint64_t total_, done_ = 0;
  bool enabled_, tty_, finished_ = false;
  int last_percent_ = -1;
  std::chrono::steady_clock::time_point start_;
};

} // namespace supernode::model
