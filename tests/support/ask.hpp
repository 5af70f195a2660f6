#pragma once
// A request and its reply in one call, for tests that speak a role's protocol themselves:
// sends `request` from `asker` to `to` under a fresh request id and waits for the reply that
// answers it (nullopt when none comes, or it is not a `Reply`).

#include "transport/endpoint.hpp"

#include <chrono>
#include <future>
#include <gtest/gtest.h>
#include <memory>
#include <optional>
#include <string>

namespace supernode::testing {

template<class Reply, class Request>
std::optional<Reply> ask(transport::endpoint& asker, const std::string& to, Request request,
                         const std::string& flow = "ems") {
  using namespace std::chrono_literals;
  auto promise = std::make_shared<std::promise<std::optional<transport::envelope>>>();
  auto future = promise->get_future();
  const auto id =
      asker.pending().add(to, std::chrono::steady_clock::now() + 5s,
                          [promise](std::optional<transport::envelope> reply, const std::string&) {
                            promise->set_value(std::move(reply));
                          });
  if (!id) return std::nullopt;
  request.request_id = *id;
  EXPECT_EQ(asker.send(flow, to, transport::make_envelope(request)), transport::send_status::ok);
  if (future.wait_for(10s) != std::future_status::ready) return std::nullopt;
  const auto reply = future.get();
  const Reply* r = reply ? reply->get<Reply>() : nullptr;
  if (!r) return std::nullopt;
  EXPECT_EQ(r->reply_to, *id) << Request::type_name << " answered another request";
  return *r;
}

} // namespace supernode::testing
