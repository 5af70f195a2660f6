#pragma once
// How an instance that is scaled down hands over its work before it leaves:
//   finish  — takes nothing new and lets what it runs end (bounded by whoever waits for it);
//   migrate — takes nothing new and moves each running sequence, with its KV, to another
//             instance, where it continues token for token.
// And the signals that ask a process for each: SIGTERM drains in the config's mode ([decode]
// drain), SIGINT stops at once.

#include <csignal>

namespace supernode::services {

enum class drain_mode { finish, migrate };

inline const char* to_string(drain_mode m) {
  return m == drain_mode::finish ? "finish" : "migrate";
}

inline constexpr int drain_finish_signal = SIGUSR1;
inline constexpr int drain_migrate_signal = SIGUSR2;

} // namespace supernode::services
