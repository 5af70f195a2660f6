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
//
// With `switch_roles`, a request that lowers one kind and raises another whose processes switch
// roles in place (prefill <-> decode, cluster/join_policy.hpp) turns running processes of the
// first into instances of the second instead of stopping some and starting others. A switched
// slot counts for the kind it serves while it runs (and is restarted serving it); a slot scaled
// down serves its own kind again when it next starts.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace supernode::services::cluster {

struct scale_request {
  std::map<std::string, int> counts; // process kind -> processes wanted
  std::string operation_id;          // empty: none (never a repeat)
  bool switch_roles = false;         // reach the counts by switching roles where possible
  bool operator==(const scale_request&) const = default;
};

struct slot_view {
  std::string name; // "decode-1"
  bool wanted = true;
  std::string serves; // the kind it serves when switched ("" or its own kind: its own)
};

struct role_switch {
  std::string slot; // "prefill-1"
  std::string to;   // the process kind it serves from now: "decode"
  bool operator==(const role_switch&) const = default;
};

struct scale_plan {
  std::vector<std::string> start, stop; // slots whose wish changes, in slot order
  std::vector<std::string> add;         // new slots (joining processes), also in start
  std::vector<role_switch> switches;    // running slots that serve another kind from now
  std::string error;                    // refused: why (nothing else is set)
  bool conflict = false;                // refused as a conflict (409 at an HTTP front)
};

// "decode" for "decode-1"; the slot name itself when it has no "-<index>".
std::string process_kind_of(const std::string& slot);

// Process kind -> why its processes cannot join at run time ("" when they can); a kind not
// listed cannot.
using join_refusals = std::map<std::string, std::string>;
// Process kinds whose processes switch roles in place among each other -> the role each serves.
using switchable_kinds = std::map<std::string, std::string>;
// Process kind -> ranks per group its joining processes form (a kind not listed: 1). Slots past
// the config's come in whole groups: decode with [ep] decode_ranks = 2 and count = 2 scales to
// 4 or 6, not to 3.
using join_group_sizes = std::map<std::string, int>;

// Processes of one kind a scale may ask for: each is a process of its own.
inline constexpr int max_processes_per_kind = 64;

// The plan that takes `slots` to `request`'s counts.
scale_plan plan_scale(const std::vector<slot_view>& slots, const scale_request& request,
                      const join_refusals& joins = {}, const switchable_kinds& switchable = {},
                      const join_group_sizes& groups = {});

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
  std::map<std::string, std::pair<scale_request, std::string>> done_;
};

} // namespace supernode::services::cluster
