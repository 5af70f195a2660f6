#pragma once
// Everything one role instance needs to talk to the cluster: a plane for each plane of the
// config, membership seeded from the config and updated by join/leave, heartbeats on the
// control flow, and pending requests that fail when their peer goes down. The actor that owns
// an endpoint only relays: messages and membership events arrive through the two handlers (on
// plane threads), and the actor calls tick() every heartbeat interval.

#include "transport/cluster_config.hpp"
#include "transport/fault_injection.hpp"
#include "transport/membership.hpp"
#include "transport/pending_requests.hpp"
#include "transport/plane.hpp"
#include "transport/retrying_sender.hpp"

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace supernode::transport {

class endpoint {
public:
  using plane_factory = std::function<std::unique_ptr<plane>(
      const cluster_config&, const plane_config&, const instance_config& self)>;
  using event_handler = std::function<void(const membership_event&)>;

  endpoint(cluster_config cluster, const std::string& self, plane_factory factory,
           uint64_t incarnation);
  ~endpoint();

  const std::string& self() const { return self_.name; }
  const cluster_config& cluster() const { return cluster_; }
  uint64_t incarnation() const { return incarnation_; }
  // A logger naming this instance and its incarnation (its planes log through one too).
  const log::logger& log() const { return log_; }
  // Application messages (heartbeats and membership messages are consumed here).
  void set_message_handler(message_handler h);
  void set_event_handler(event_handler h);
  // Called once, on a plane thread, when a member tells this endpoint that its incarnation was
  // fenced (peers declared it down after a hang and recovered its work). The process must
  // drop its state and come back as a new incarnation: the node exits for its supervisor to
  // restart it. Until then every peer refuses what it sends.
  using fenced_handler = std::function<void(const std::string& by, const std::string& reason)>;
  void set_fenced_handler(fenced_handler h);
  void start();
  void stop();

  // For an instance that joined at run time (instance_config::joined): the live members it
  // joins through. It announces itself to each with member_join asking for the directory, until
  // one answers; then it announces itself to every member the directory lists. A seed without
  // an address is a config instance (its address is the config's). Call before start().
  struct join_seed {
    std::string peer;
    std::string control_address; // "" : from the config
  };
  void set_join_seeds(std::vector<join_seed> seeds);
  // Every member this endpoint knows (from the config, joins and directories), by name.
  std::map<std::string, member> members() const;

  // Sends on the plane the config assigns to `flow`. A peer known to be down answers peer_down
  // at once instead of queueing toward nobody.
  send_status send(const std::string& flow, const peer_id& to, const envelope& message);
  // Like send(), but a full queue is waited out on the endpoint's retry thread (in order per
  // destination, until `deadline`) instead of failing: ok means sent or queued. For callers that
  // must not lose the message and must not block (actor threads). Messages given up on are
  // logged.
  send_status send_retrying(const std::string& flow, const peer_id& to, const envelope& message,
                            std::chrono::milliseconds deadline = std::chrono::milliseconds(5000));

  // A message whose type the receiving role's interface lacks: counted per type, and logged
  // once per type with its sender and the role. Called on the plane thread that received it.
  void count_unexpected(const peer_id& from, uint16_t type, const std::string& role);
  // Type name -> messages of that type received outside the role's interface, since start.
  std::map<std::string, uint64_t> unexpected_messages() const;
  // A message refused because of who sent it (a leave naming another member, tokens from an
  // instance the request is not on, a reply from a peer that was not asked): counted by
  // `reason` (a fixed word: it labels a metric) and logged, at most once a second per reason,
  // naming the sender. The caller drops the message. Any thread.
  void reject(const peer_id& from, const std::string& reason, const std::string& detail);
  // Reason -> messages refused since start: reject()'s and the planes' own (a connection whose
  // proven identity differs from the name it uses, a refused handshake).
  std::map<std::string, uint64_t> rejected_messages() const;
  // The role a member has in the config or announced when it joined; "" for a stranger.
  std::string role_of(const peer_id& peer) const;
  // True when `from` is a member with `role`; otherwise rejects the message (reason
  // "not_from_<role>", naming `what`) and returns false. For handlers: `if (!out.expect_role(
  // from, "scheduler", "decode_assign")) return;`
  bool expect_role(const peer_id& from, const std::string& role, const char* what);
  // Sends a heartbeat to every member that has not left (live or down) over the control flow
  // and declares silent members down. Call every cluster().heartbeat_interval.
  void tick(steady_time now);
  // Announces this instance to `peer` (instances added at run time), and departure to all.
  void announce_join(const peer_id& peer, bool wants_directory = false);
  void announce_leave(const std::string& reason);

  // Messages waiting for their sender's next heartbeat or join, from every peer.
  size_t messages_held() const;

  pending_requests& pending() { return pending_; }
  bool is_alive(const peer_id& peer) const;
  // The incarnation of a live member (0: not heard from yet); nothing when it is not alive.
  std::optional<uint64_t> live_incarnation(const peer_id& peer) const;
  const plane* plane_named(const std::string& name) const;

  // Messages held for their sender's next heartbeat or join (membership::sender_unconfirmed)
  // before one is dropped (counted as `held_overflow`). A restarted process's first
  // messages before its first heartbeat are few.
  static constexpr size_t max_held_per_peer = 256;

private:
  // send() without the liveness check: through the fault injector to the flow's plane.
  send_status send_to_member(const std::string& flow, const peer_id& to, const envelope& message);
  void on_message(const peer_id& from, envelope message);
  // Hands an application message to its pending request (a reply) or to the role.
  void deliver(const peer_id& from, envelope message);
  // What on_message does with an application message whose sender is unconfirmed, or queued
  // behind held ones (under mutex_).
  enum class hold_outcome : uint8_t { not_held, held, overflow };
  hold_outcome hold_if_unconfirmed(const peer_id& from, envelope& message, steady_time now,
                                   bool links_up);
  // Delivers, in order, what `peer` has held, once it is alive (after its joined event).
  // Messages that arrive meanwhile queue behind them.
  void release_held(const peer_id& peer);
  // Drops (rejects under `reason`) what `peer` has held and is not being released.
  void drop_held(const peer_id& peer, const std::string& reason, const std::string& detail);
  // Drops what waited a whole liveness bound without its sender's heartbeat (tick).
  void expire_held(steady_time now);
  // No plane has `peer`'s connection down now (membership revives a member whose connection
  // dropped only then).
  bool links_up_to(const peer_id& peer) const;
  // The plane the control flow (heartbeats, joins, fencing notices) rides.
  plane& control_plane() const;
  std::string membership_refusal(const peer_id& from, const envelope& message) const;
  // A message of `from`'s fenced incarnation (anything but a heartbeat or join bringing a new
  // one): refused, and a heartbeat answered with member_fenced so the process learns it.
  bool refuse_if_fenced(const peer_id& from, const envelope& message);
  void on_fenced_notice(const peer_id& from, const member_fenced& notice);
  void emit(const std::vector<membership_event>& events);
  // This instance's member_join, with the addresses its planes actually bound.
  member_join own_join(bool wants_directory) const;
  // Why a member_join (sent by `from`, or listed by it in a directory) is refused; "" when it
  // is not: a config instance keeps its configured role, and a name outside the config must
  // read "<role>-<n>" for the role it claims.
  std::string join_refusal(const member_join& j) const;
  void on_directory(const peer_id& from, const member_directory& d);
  // Connects the planes to the addresses a member announced (itself, or in a directory),
  // unless they are the config's or already connected.
  void connect_announced(const member_join& j);
  // The config's instance of that name (not a joined one); null when the config has none.
  const instance_config* config_instance(const std::string& name) const;
  // A joined instance: re-announces itself to the seeds until a directory came, and to members
  // that are down and config members that left (restarted, such a member knows only the config).
  void rejoin_tick();
  void log_membership(const membership_event& e);

  cluster_config cluster_;
  instance_config self_;
  uint64_t incarnation_;
  log::logger log_;
  log::rate_limiter membership_lines_;
  uint64_t heartbeat_seq_ = 0;
  std::map<std::string, std::unique_ptr<plane>> planes_; // by plane name
  // After the planes, so it goes first: its delayed frames reference them. Null outside chaos
  // runs (fault_injection.hpp).
  std::unique_ptr<fault_injector> faults_;
  mutable std::mutex mutex_; // guards membership_ and held_
  membership membership_;
  struct held_messages {
    std::deque<envelope> messages;
    steady_time since{};    // when the oldest waiting one arrived
    bool releasing = false; // a thread is delivering them: newer ones queue behind
  };
  std::map<peer_id, held_messages> held_;
  pending_requests pending_;
  retrying_sender retry_;
  mutable std::mutex refused_mutex_;         // guards unexpected_ and rejected_
  std::map<uint16_t, uint64_t> unexpected_;  // by type id; named when read
  std::map<std::string, uint64_t> rejected_; // by reason
  log::rate_limiter rejected_lines_;
  message_handler on_message_;
  event_handler on_event_;
  fenced_handler on_fenced_;
  std::atomic<bool> fenced_{false};
  std::vector<join_seed> join_seeds_;
  std::atomic<bool> directory_received_{false};
  uint64_t ticks_ = 0;
};

} // namespace supernode::transport
