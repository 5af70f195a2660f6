#include "services/loadgen/sse_parser.hpp"

namespace supernode::services::loadgen {

void sse_parser::feed(std::string_view bytes, std::vector<sse_event>& out) {
  for (size_t i = 0; i < bytes.size();) {
    const char c = bytes[i];
    // A CRLF split across two reads is still one line ending.
    if (after_cr_ && c == '\n') {
      after_cr_ = false;
      ++i;
      continue;
    }
    after_cr_ = false;
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      take_line(out);
      ++i;
      continue;
    }
    const size_t end = bytes.find_first_of("\r\n", i);
    const size_t stop = end == std::string_view::npos ? bytes.size() : end;
    line_.append(bytes.substr(i, stop - i));
    i = stop;
  }
}

void sse_parser::take_line(std::vector<sse_event>& out) {
  if (line_.empty()) {
    // A blank line ends the event; one without data is dropped, as browsers do.
    if (has_data_) out.push_back(std::move(pending_));
    pending_ = {};
    has_data_ = false;
    return;
  }
  if (line_.front() == ':') { // comment, e.g. a keep-alive ping
    line_.clear();
    return;
  }
  const size_t colon = line_.find(':');
  std::string_view field = line_, value;
  if (colon != std::string::npos) {
    field = std::string_view(line_).substr(0, colon);
    value = std::string_view(line_).substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) pending_.data.push_back('\n');
    pending_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    pending_.event.assign(value);
  }
  // `id:` and `retry:` only matter to a client that reconnects; this one never does.
  line_.clear();
}

} // namespace supernode::services::loadgen
