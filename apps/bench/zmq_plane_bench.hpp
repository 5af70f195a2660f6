#pragma once
#include <nlohmann/json.hpp>

namespace supernode::apps {
// The zmq plane between two processes over ipc, against raw cppzmq DEALER/ROUTER with no
// framing, in the same run: 64 B round trip (median, p99) and one-way bandwidth from 4 KiB to
// 64 MiB, with the ratio ours/raw for each figure.
nlohmann::json run_zmq_plane_bench(bool quick);
// The zmq plane with CurveZMQ off and on over tcp loopback, in the same run: 64 B round trip
// (median, p99) and bulk bandwidth of 256 KiB, 1 MiB and 64 MiB bulk_chunks, with the ratio on/off.
nlohmann::json run_zmq_curve_bench(bool quick);
} // namespace supernode::apps
