#pragma once
// What a `scale` request asks of the supervisor, as pure logic: which slots of which process
// kinds to start and which to drain, the checks that refuse a request (an unknown kind, more
// processes than the kind has slots), and idempotency per operation id (a repeat gets the first
// answer; the same id with other counts, or a second operation while one runs, is a conflict).
//
// Slots start as the config's: process kind "decode" with count = 2 has slots decode-0 and
// decode-1, and a scale keeps the lowest-numbered ones. Beyond them, a kind whose processes can
// join a live cluster (`role --join`: addresses of their own) gets new slots decode-2, ...,
// which stay the supervisor's from then on (stopped when scaled down, started again later).

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
  std::vector<std::string> add;         // new slots (joining processes), also in start
  std::string error;                    // refused: why (nothing else is set)
  bool conflict = false;                // refused as a conflict (409 at an HTTP front)
};

// "decode" for "decode-1"; the slot name itself when it has no "-<index>".
std::string process_kind_of(const std::string& slot);

// Process kind -> why its processes cannot join at run time ("" when they can); a kind not
// listed cannot.
using join_refusals = std::map<std::string, std::string>;

// Processes of one kind a scale may ask for: each is a process of its own.
inline constexpr int max_processes_per_kind = 64;

// The plan that takes `slots` to `request`'s counts.
scale_plan plan_scale(const std::vector<slot_view>& slots, const scale_request& request,
                      const join_refusals& joins = {});

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
