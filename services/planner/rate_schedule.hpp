#pragma once
// A request rate that changes in steps over a benchmark run, as `--rate-schedule` writes it:
// "0:1,60:6,180:1" is 1 request/s from 0 s, 6 from 60 s, 1 again from 180 s to the end.
// Times are seconds from the start, strictly increasing, the first 0; rates are requests per
// second, 0 or more (0: a pause). Both may have a fraction.

#include <cstdint>
#include <string_view>
#include <vector>

namespace supernode::services::planner {

struct rate_step {
  double from_s = 0; // seconds from the start
  double rate = 0;   // requests per second from then on
};

class rate_schedule {
public:
  // Throws std::invalid_argument naming the element (by position and text) and what is wrong.
  static rate_schedule parse(std::string_view text);

  // The rate of the last step that started at or before `seconds` (the first before 0).
  double rate_at(double seconds) const;
  const std::vector<rate_step>& steps() const { return steps_; }
  // The same rates with every time multiplied by `factor` (> 0): a shorter run of one shape.
  rate_schedule scaled(double factor) const;
  // Poisson arrivals, in seconds from the start, until `duration_s`: within each step
  // exponential gaps at its rate (none during a pause), from `seed` (the same seed, the same
  // times: every compared run sends the same traffic).
  std::vector<double> arrivals(double duration_s, uint64_t seed) const;

private:
  std::vector<rate_step> steps_;
};

} // namespace supernode::services::planner
