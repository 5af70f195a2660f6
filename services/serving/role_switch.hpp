#pragma once
// The signals that ask a running process to switch the role it serves in place (same process,
// same model copy): it drains the instance it runs (as for a scale-down, in the config's drain
// mode), says goodbye, and starts an instance of the other role under a joined name
// (cluster/join_policy.hpp), printing "ready <instance>" once it serves. Real-time signals: the
// standard ones are taken by the stop and drain signals (drain_mode.hpp).

#include <csignal>
#include <string>

namespace supernode::services {

inline int switch_to_prefill_signal() {
  return SIGRTMIN + 1;
}
inline int switch_to_decode_signal() {
  return SIGRTMIN + 2;
}

// The signal that asks for `role` ("prefill" or "decode"); 0 for any other role.
inline int role_switch_signal(const std::string& role) {
  if (role == "prefill") return switch_to_prefill_signal();
  if (role == "decode") return switch_to_decode_signal();
  return 0;
}

// The role `signal` asks for, or "" when it asks for none.
inline std::string role_switch_target(int signal) {
  if (signal == switch_to_prefill_signal()) return "prefill";
  if (signal == switch_to_decode_signal()) return "decode";
  return "";
}

} // namespace supernode::services
