#pragma once
// POST /admin/scale: the gateway's door to the supervisor's scale operation
// (services/cluster/supervisor.hpp), for orchestrators and the planner's operators.
//
//   POST /admin/scale  Authorization: Bearer <admin token>
//   {"counts":{"decode":3,"prefill":1},"operation_id":"op-7","drain_timeout_ms":60000,
//    "drain":"migrate","switch":false}   ("switch": prefill and decode processes switch roles)
//   → 200 the supervisor's answer once the counts are reached ({"ok":true,"took_s":...})
//     401 no or a wrong admin token   403 no [gateway] admin_token_file: the admin API is off
//     400 a malformed body, or a request the supervisor refuses (an unknown kind, too many)
//     409 another operation runs, or the operation id was used with other counts
//     429 too many scale calls waiting   503 no supervisor answers on this host
//
// The token file has the API keys file's format and rules (0600, `<token> [name=...]`); the
// tokens are kept as digests and compared in constant time. The supervisor answers once the
// change is done, so each call waits on a detached thread of its own, never on an io or actor
// thread, and a gateway going down does not wait for it.

#include "services/gateway/api_keys.hpp"
#include "services/gateway/http_server.hpp"

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>

namespace supernode::services::gateway {

class admin_scale {
public:
  // `tokens`: none when [gateway] admin_token_file is not set.
  admin_scale(std::optional<api_key_table> tokens, std::filesystem::path supervisor_socket);
  ~admin_scale();
  admin_scale(const admin_scale&) = delete;
  admin_scale& operator=(const admin_scale&) = delete;

  void handle(std::shared_ptr<http_exchange> ex, const http_request& req);
  // Before the HTTP server stops: calls still waiting for the supervisor answer nobody (a
  // gateway going down does not wait minutes for a drain to end).
  void stop();

  static constexpr size_t max_waiting = 4;

private:
  // What a waiting call shares with the gateway; the call's thread is detached and holds it.
  struct shared_state {
    std::mutex mutex;
    bool open = true;
    size_t waiting = 0;
  };
  static void ask(const std::shared_ptr<shared_state>& state, const std::filesystem::path& socket,
                  const std::shared_ptr<http_exchange>& ex, const std::string& request,
                  long long drain_ms);

  std::optional<api_key_table> tokens_;
  std::filesystem::path socket_;
  std::shared_ptr<shared_state> state_ = std::make_shared<shared_state>();
};

} // namespace supernode::services::gateway
