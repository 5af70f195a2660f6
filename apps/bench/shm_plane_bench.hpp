#pragma once
#include <nlohmann/json.hpp>

namespace supernode::apps {
// The shm plane (UB stand-in) between two processes (this one and a forked child), measured in
// one run against baselines taken in the same run: 64 B round trip through the plane and through
// a bare shm ring (no framing); bandwidth for 4 KiB..64 MiB through the plane (encode + ring +
// decode) and through a registered region (write + publish), against memcpy of the same sizes.
// Forks: call it before this process starts threads of its own.
nlohmann::json run_shm_plane_bench(bool quick);
} // namespace supernode::apps
