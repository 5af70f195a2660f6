#pragma once
// Boost.Beast for the HTTP roles and tools, included the same way everywhere: <utility> first
// (Boost 1.74's asio uses std::exchange without including it), and Beast's headers with g++ 12's
// false -Wmaybe-uninitialized on the boost::optional inside its parser (ASan builds, -O3)
// silenced for those headers only.

// clang-format off
#include <utility>
#include <boost/asio.hpp>
// clang-format on
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#pragma GCC diagnostic pop
