#pragma once
// The bytes the gateway's HTTP server writes, built before they are queued so the io thread only
// copies them out: whole responses, the header of an event stream and its chunks. Private to the
// gateway's HTTP layer.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace supernode::services::gateway::wire {

// A complete response with Content-Length. `version` is the request's (10 or 11).
std::string response(unsigned status, unsigned version, bool keep_alive,
                     std::string_view content_type, std::string body,
                     const std::vector<std::pair<std::string, std::string>>& extra = {});

// The 200 header of a Server-Sent Events stream; chunked unless the client speaks HTTP/1.0,
// whose streams end by closing the connection.
std::string event_stream_header(unsigned version, bool keep_alive, bool chunked);

// One event ("data: " before every line of the payload, a blank line after), as a chunk when
// `chunked`.
std::string event(std::string_view payload, bool chunked);

inline constexpr std::string_view last_chunk = "0\r\n\r\n";
inline constexpr std::string_view continue_100 = "HTTP/1.1 100 Continue\r\n\r\n";

} // namespace supernode::services::gateway::wire
