#pragma once
// Who is in the cluster and who is alive. Members come from the config (static) and from
// join/leave messages at run time; liveness comes from heartbeats on the VPC plane and from
// the planes' own disconnect signals. Pure logic over an explicit clock, so the timing rules
// are tested without sleeping:
//   - a member whose heartbeats stop is declared down after heartbeat_interval × missed
//     (checked on every tick; callers tick at least every heartbeat_interval, so a silent peer
//     is reported within interval × (missed + 1));
//   - a plane that sees the peer's connection drop (its process died) reports it at once;
//   - a heartbeat with a new incarnation is a restarted process: the old one is down, the new
//     one joins. Members from the config start with incarnation 0 ("not yet heard from") and
//     take the incarnation of their first heartbeat;
//   - a member declared down for silence once we knew its incarnation is fenced: that
//     incarnation never comes back (its work was recovered elsewhere), only a new one does. A
//     dropped connection does not fence (the process may still be starting its planes);
//   - a member that is down comes back in the same incarnation only while no plane has its
//     connection down (`links_up`): what a killed process sent just before it died can still
//     be queued behind the drop, and is no sign of life;
//   - a member whose incarnation is known comes back only by a heartbeat or join, which say
//     which process speaks; its other messages wait for one (sender_unconfirmed).

#include "transport/control_messages.hpp"
#include "transport/liveness.hpp"

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace supernode::transport {

using steady_time = std::chrono::steady_clock::time_point;

enum class member_state : uint8_t { alive, down, left };
const char* to_string(member_state s);

struct member {
  std::string id;
  std::string role;
  uint64_t incarnation = 0;
  std::map<std::string, std::string> endpoints; // plane name -> address
  member_state state = member_state::alive;
  steady_time last_heard{};
  bool fenced = false; // this incarnation was declared down for silence: refused from now on
  // It left by another member's word only (a directory): its own heartbeat in that incarnation
  // outranks the report and brings it back.
  bool leave_reported = false;
};

struct membership_event {
  enum class kind : uint8_t { joined, left, down } what;
  std::string peer;
  std::string reason;
};

// A fresh incarnation for an instance starting now. Peers take the larger incarnation for the
// newer process, so it must grow with every start: wall-clock time first, the pid and a counter
// in the low 16 bits only to separate two starts in the same 65 µs. (pid ^ time did not grow: a
// restart with a smaller pid looked older and its heartbeats were ignored.)
uint64_t new_incarnation();

class membership {
public:
  explicit membership(liveness_options options = {}) : options_(options) {}

  const liveness_options& options() const { return options_; }
  // `links_up`: no plane knows the sender's connection to be down now (see above).
  std::vector<membership_event> on_join(const member_join& m, steady_time now,
                                        bool links_up = true);
  std::vector<membership_event> on_leave(const member_leave& m, steady_time now);
  // A leave another member reports (a directory's): taken only for a member this process has
  // not heard from in the leaving incarnation or a later one (a config member not heard from
  // yet, or an older process). What a member says itself outranks what another says of it:
  // before, and after (its heartbeat in that incarnation brings it back). Members this process
  // never knew are not made up.
  std::vector<membership_event> on_reported_leave(const member_leave& m, steady_time now);
  std::vector<membership_event> on_heartbeat(const heartbeat& h, steady_time now,
                                             bool links_up = true);
  // Any other message from `peer` is a sign of life too. A config member not heard from yet
  // (incarnation 0) that was declared down for silence is alive again: a process that starts
  // after its peers' liveness window may send its first request before its first heartbeat
  // arrives. A member whose incarnation is known is not revived by a message: see
  // sender_unconfirmed.
  std::vector<membership_event> on_message(const std::string& peer, steady_time now,
                                           bool links_up = true);
  // True when a message from `peer` (other than a heartbeat or a join, which carry their
  // incarnation) cannot be told to come from the incarnation we know: the member is down with
  // its links up again, or its incarnation is fenced. A restarted process's first message can
  // overtake its first heartbeat; taken as the old process's, it would revive a process that
  // is gone (or be refused as the fenced one's). Such a message waits for the member's next
  // heartbeat or join (the endpoint holds it). False for an unfenced member whose links are
  // still down (what it sent before the drop), one that left, and one not heard from yet.
  bool sender_unconfirmed(const std::string& peer, bool links_up) const;
  std::vector<membership_event> on_disconnect(const std::string& peer, const std::string& reason,
                                              steady_time now);
  // Declares down the members silent for longer than the liveness bound. A tick later than one
  // bound after the previous one means this process was not running (SIGSTOPped, stalled): the
  // silence it sees is its own, so every member gets a fresh bound instead (the heartbeats
  // queued meanwhile arrive next) and last_pause() says how long the pause was. A tick late by
  // less than that credits its lateness to every member: silence counts only while we ran.
  //
  // `read_up_to`: the time up to which this process has read its peers' heartbeats (the
  // control plane's read_up_to). Silence counts only until then: a receive thread that is behind
  // must not make healthy peers look dead — and be fenced for it.
  std::vector<membership_event> tick(steady_time now) { return tick(now, now); }
  std::vector<membership_event> tick(steady_time now, steady_time read_up_to);
  // The pause the last tick found (zero when none).
  std::chrono::nanoseconds last_pause() const { return last_pause_; }

  const member* find(const std::string& id) const;
  // True when `id`'s current incarnation is fenced (a message from it is refused).
  bool is_fenced(const std::string& id) const;
  bool is_alive(const std::string& id) const;
  std::vector<const member*> alive_with_role(const std::string& role) const;
  // Every member, whatever its state, by name.
  const std::map<std::string, member>& members() const { return members_; }
  size_t size() const { return members_.size(); }

private:
  liveness_options options_;
  std::map<std::string, member> members_;
  std::optional<steady_time> last_tick_;
  std::chrono::nanoseconds last_pause_{0};
};

} // namespace supernode::transport
