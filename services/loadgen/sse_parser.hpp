#pragma once
// Incremental text/event-stream parser (the WHATWG "server-sent events" rules that matter to a
// client): a network read may end anywhere, inside a line, between a CR and its LF, or hold
// several events, so the parser keeps the unfinished line and event between calls.

#include <string>
#include <string_view>
#include <vector>

namespace supernode::services::loadgen {

struct sse_event {
  std::string event; // the `event:` field, empty for the default "message"
  std::string data;  // the `data:` lines joined with '\n'
};

class sse_parser {
public:
  // Appends to `out` every event that `bytes` completes.
  void feed(std::string_view bytes, std::vector<sse_event>& out);

private:
  void take_line(std::vector<sse_event>& out);

  std::string line_;
  sse_event pending_;
  bool has_data_ = false;
  bool after_cr_ = false;
};

} // namespace supernode::services::loadgen
