#pragma once
// The scripted run of `bench scale`: scale operations sent to the supervisor at set times while
// the load runs ("20:decode=4;40:decode=1@migrate;60:prefill=1,decode=3@switch"), with what
// each answered, and the expert-parallel groups' re-formations read off the instances' logs:
// per formation (epoch), when its first and last rank switched to it and the longest pause a
// rank logged ("serving again N ms after it stopped") — together the group's resize pause.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace supernode::apps {

struct scripted_scale {
  double at_s = 0;                   // seconds into the load
  std::map<std::string, int> counts; // process kind -> processes
  std::string drain;                 // "finish", "migrate" or "" (the config's)
  bool switch_roles = false;         // "@switch"
  std::string text;                  // as written
};

// "AT:KIND=N[,KIND=N...][@finish|@migrate|@switch];..." with every time multiplied by
// `time_factor`. Throws std::invalid_argument naming the bad part.
std::vector<scripted_scale> parse_scale_script(const std::string& text, double time_factor = 1);

// What the supervisor answered one scripted operation (its JSON line), and when it was sent.
struct scripted_outcome {
  scripted_scale step;
  double sent_s = 0;
  std::string answer;
};

// One formation of a group, from the "re-formed over ..." lines of its ranks.
struct ep_reform {
  std::string group, epoch;
  std::string ranks;              // "4 of 4 ranks", as the first line says
  double first_s = 0, last_s = 0; // the first and the last rank's line, on the run's clock
  int lines = 0;                  // ranks that logged it
  long long longest_rank_pause_ms = 0;
  // The group's resize pause: no step runs while its ranks are split between formations, so
  // the spread between the first and the last rank's switch, plus the longest pause a rank
  // logged (rounded to milliseconds).
  long long pause_ms() const;
};

// The re-formations in `log_texts` (whole log files) whose lines fall at or after `unix_t0`
// (their ISO-8601 UTC timestamps), in the order they happened.
std::vector<ep_reform> ep_reforms_in(const std::vector<std::string>& log_texts, double unix_t0);

} // namespace supernode::apps
