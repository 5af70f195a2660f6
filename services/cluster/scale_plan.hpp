#pragma once
// What a `scale` request asks of the supervisor, as pure logic: which slots of which process
// kinds to start and which to drain, the checks that refuse a request (an unknown kind, more
// processes than the kind has slots), and idempotency per operation id (a repeat gets the first
// answer; the same id with other counts, or a second operation while one runs, is a conflict).
//
// Slots are the config's: process kind "decode" with count = 2 has slots decode-0 and decode-1,
// and a scale keeps the lowest-numbered ones. Beyond the configured count a process must join
// with addresses of its own (not yet: `--join`).

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace supernode::services::cluster {

struct scale_request {
  std::map<std::string, int> counts; // process kind -> processes wanted
  std::string operation_id;          // empty: none (never a repeat)
};

struct slot_view {
  std::string name; // "decode-1"
  bool wanted = true;
};

struct scale_plan {
  std::vector<std::string> start, stop; // slots whose wish changes, in slot order
  std::string error;                    // refused: why (nothing else is set)
  bool conflict = false;                // refused as a conflict (409 at an HTTP front)
};

// "decode" for "decode-1"; the slot name itself when it has no "-<index>".
std::string process_kind_of(const std::string& slot);

// The plan that takes `slots` to `request`'s counts.
scale_plan plan_scale(const std::vector<slot_view>& slots, const scale_request& request);

// Operation ids and their answers.
class scale_operations {
public:
  enum class verdict { fresh, repeat, conflict };
  // What `request` is: new work, a repeat of an operation (finished: its answer is returned; or
  // the one running), or a conflict (another operation runs; the id was used with other counts).
  verdict classify(const scale_request& request, std::string* answer) const;
  void begin(const scale_request& request);
  // The running operation ended with `answer` (kept for repeats of its id).
  void finish(const std::string& answer);
  bool running() const { return running_.has_value(); }
  const std::optional<scale_request>& current() const { return running_; }

private:
  std::optional<scale_request> running_;
  std::map<std::string, std::pair<std::map<std::string, int>, std::string>> done_;
};

} // namespace supernode::services::cluster
