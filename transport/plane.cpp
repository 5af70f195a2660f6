#include "transport/plane.hpp"

namespace supernode::transport {

const char* to_string(send_status s) {
  switch (s) {
  case send_status::ok:
    return "ok";
  case send_status::queue_full:
    return "queue_full";
  case send_status::unknown_peer:
    return "unknown_peer";
  case send_status::peer_down:
    return "peer_down";
  case send_status::too_large:
    return "too_large";
  case send_status::closed:
    return "closed";
  }
  return "unknown";
}

} // namespace supernode::transport
