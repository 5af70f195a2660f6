#include "model/progress.hpp"

#include <cstdio>
#include <unistd.h>

namespace supernode::model {

progress_bar::progress_bar(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total == 0 ? 1 : total), enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) != 0), start_(std::chrono::steady_clock::now()) {}

progress_bar::~progress_bar() {
  finish();
}

void progress_bar::advance(uint64_t amount) {
  done_ += amount;
  draw(false);
}

void progress_bar::finish() {
  if (finished_) return;
  finished_ = true;
  done_ = total_;
  draw(true);
}

void progress_bar::draw(bool final) {
  if (!enabled_) return;
  int percent = static_cast<int>(100 * (done_ > total_ ? total_ : done_) / total_);
  // Off a terminal, print every 25% only, so CI logs stay short.
  if (percent == last_percent_ || (!tty_ && !final && percent / 25 == last_percent_ / 25)) return;
  last_percent_ = percent;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  constexpr int width = 30;
  int filled = percent * width / 100;
  std::string bar(filled, '#');
  bar.append(width - filled, ' ');
  std::fprintf(stderr, "%s%s [%s] %3d%% %.1fs%s", tty_ ? "\r" : "", label_.c_str(), bar.c_str(),
               percent, secs, (final || !tty_) ? "\n" : "");
  std::fflush(stderr);
}

} // namespace supernode::model
