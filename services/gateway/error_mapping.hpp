#pragma once
// The one place where error codes become HTTP: status, OpenAI error type, and the code's name in
// the error body's `code` field (its number beside it, as `supernode_code`).

#include "services/gateway/openai_api.hpp"
#include "services/protocol/error_codes.hpp"

#include <string>

namespace supernode::services::gateway {

struct http_error_mapping {
  unsigned status = 500;
  const char* openai_type = "server_error";
};

http_error_mapping http_mapping_of(uint16_t code);

// The client's view of `e`: status, type and code from the table, e.message as the message.
api_error to_api_error(const protocol::error& e, std::string param = "");

// The client's view of an error that came from the cluster, whose messages may name addresses
// and files: its message without them, the code's name and number, and the instance that
// answered (`instance`, whose log holds the full message).
api_error to_client_api_error(const protocol::error& e, const std::string& instance,
                              std::string param = "");

// `message` with every word that locates something inside the cluster (a URL such as ipc://...
// or tcp://..., an absolute or relative path, an address:port) replaced by "<internal>".
// Instance names stay: they are what a client reports and an operator looks up.
std::string without_internals(std::string_view message);

// docs/errors.md's table: every code with its name, subsystem, retry bit, HTTP answer, meaning.
std::string error_table_markdown();

} // namespace supernode::services::gateway
