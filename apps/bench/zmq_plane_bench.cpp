#include "apps/bench/zmq_plane_bench.hpp"

#include "services/cluster/process_launcher.hpp"
#include "transport/cluster_keys.hpp"
#include "transport/control_messages.hpp"
#include "transport/free_ports.hpp"
#include "transport/zmq_plane.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <future>
#include <malloc.h>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unistd.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace supernode::apps {

using namespace transport;
using clock_type = std::chrono::steady_clock;

namespace {

// Both children follow the same schedule as the parent, so the raw one needs no framing to
// know where a burst ends.
struct schedule {
  int warmup = 200, rounds = 0, reps = 0;
  std::vector<size_t> sizes{size_t{4} << 10, size_t{64} << 10, size_t{1} << 20, size_t{16} << 20,
                            size_t{64} << 20};
  std::vector<size_t> counts;
};

schedule make_schedule(bool quick) {
  schedule s;
  s.rounds = quick ? 2000 : 20000;
  s.reps = quick ? 2 : 3;
  const size_t burst = quick ? size_t{64} << 20 : size_t{512} << 20;
  for (size_t size : s.sizes)
    s.counts.push_back(std::max(burst / size, quick ? size_t{3} : size_t{8}));
  return s;
}

struct endpoints {
  std::string parent_control, parent_bulk, child_control, child_bulk, raw;
};

endpoints make_endpoints() {
  const std::string base = "ipc:///tmp/sn-zmq-bench-" + std::to_string(getpid()) + "-";
  return {base + "parent-control.sock", base + "parent-bulk.sock", base + "child-control.sock",
          base + "child-bulk.sock", base + "raw.sock"};
}

const auto wait_limit = std::chrono::seconds(60);

// A child running `body`, killed if we die. Receivers reuse their heap instead of faulting in
// fresh pages for every large message (glibc maps anything over 32 MiB anew), as a server of KV
// transfers would be set up. Both children get it, so ours and raw compare the same way.
services::cluster::child_process spawn(const std::function<int()>& body) {
  return services::cluster::child_process::fork_running([&] {
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    try {
      return body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "zmq plane bench child: %s\n", e.what());
      return 1;
    }
  });
}

// Both planes of a pair hold these keys (CURVE on) or none (off).
using bench_keys = std::shared_ptr<const cluster_keys>;

// The zmq plane's side of the child: echo pings, acknowledge each completed burst.
int ours_child(const endpoints& ep, const bench_keys& keys) {
  register_control_messages();
  zmq_plane_options options;
  options.self = "bench-child";
  options.control_endpoint = ep.child_control;
  options.bulk_endpoint = ep.child_bulk;
  options.keys = keys;
  zmq_plane plane(options);
  std::promise<void> done;
  std::once_flag once;
  auto finish = [&] { std::call_once(once, [&] { done.set_value(); }); };
  std::mutex m;
  std::map<uint64_t, uint64_t> received;
  plane.set_disconnect_handler([&](const peer_id&) { finish(); });
  plane.set_handler([&](const peer_id& from, envelope msg) {
    if (auto* p = msg.get<ping>()) {
      plane.send(from, make_envelope(pong{p->seq, p->sent_ns, p->payload}));
    } else if (auto* c = msg.get<bulk_chunk>()) {
      std::lock_guard lock(m);
      auto& r = received[c->transfer_id];
      r += c->data.size();
      if (r >= c->total_bytes) {
        plane.send(from, make_envelope(bulk_ack{c->transfer_id, r, 0}));
        received.erase(c->transfer_id);
      }
    } else if (msg.is<member_leave>()) {
      finish();
    }
  });
  plane.connect("bench-parent", ep.parent_control, ep.parent_bulk);
  plane.start();
  plane.send("bench-parent", make_envelope(member_join{"bench-child", "bench", 0, {}}));
  done.get_future().wait();
  plane.stop();
  return 0;
}

// The raw side: a ROUTER that echoes, then swallows bursts and answers each with one byte.
int raw_child(const endpoints& ep, const schedule& s) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::rcvtimeo, 60000);
  router.bind(ep.raw);
  std::vector<zmq::message_t> parts;
  auto receive = [&] {
    parts.clear();
    if (!zmq::recv_multipart(router, std::back_inserter(parts)))
      throw std::runtime_error("raw child: timed out");
  };
  for (int i = 0; i < s.warmup + s.rounds; ++i) {
    receive();
    zmq::send_multipart(router, parts);
  }
  for (size_t k = 0; k < s.sizes.size(); ++k)
    for (int rep = 0; rep < s.reps; ++rep) {
      for (size_t i = 0; i < s.counts[k]; ++i) receive();
      router.send(parts[0], zmq::send_flags::sndmore);
      router.send(zmq::str_buffer("k"), zmq::send_flags::none);
    }
  router.close();
  ctx.close();
  ::unlink(ep.raw.substr(6).c_str());
  return 0;
}

// What the parent's plane has received, waited on with a limit.
struct replies {
  std::mutex m;
  std::condition_variable cv;
  uint64_t last_pong = 0;
  std::set<uint64_t> acks;
  bool joined = false;

  template<class Pred>
  void wait(Pred pred, const char* what) {
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, wait_limit, pred))
      throw std::runtime_error(std::string("zmq plane bench: timed out waiting for ") + what);
  }
};

double micros(clock_type::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

nlohmann::json summary(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  return {{"median", us[us.size() / 2]}, {"p99", us[us.size() * 99 / 100]}};
}

void raw_receive(zmq::socket_t& dealer) {
  zmq::message_t reply;
  if (!dealer.recv(reply)) throw std::runtime_error("zmq plane bench: raw child timed out");
}

// 64 B round trips through the plane (µs each, the warm-up left out); pings count on from
// `got.last_pong`, so a plane can be measured more than once.
std::vector<double> plane_round_trips(zmq_plane& plane, replies& got, int warmup, int rounds) {
  std::vector<double> us;
  const auto payload = std::vector<char>(64, 'x');
  const uint64_t first = got.last_pong + 1;
  for (uint64_t i = first; i < first + uint64_t(warmup + rounds); ++i) {
    const auto t0 = clock_type::now();
    if (plane.send("bench-child", make_envelope(ping{i, 0, payload})) != send_status::ok)
      throw std::runtime_error("zmq plane bench: ping not accepted");
    got.wait([&] { return got.last_pong == i; }, "a pong");
    if (i >= first + uint64_t(warmup)) us.push_back(micros(clock_type::now() - t0));
  }
  return us;
}

// `count` sends of one `size`-byte bulk_chunk (transfer `id`) until the child's ack; GiB/s.
double plane_burst(zmq_plane& plane, replies& got, const std::vector<char>& source, size_t count,
                   uint64_t id) {
  const double gib = double(source.size()) * double(count) / double(1 << 30);
  // One message sent `count` times: its data goes out as its own zero-copy part, so a send
  // packs only the small head (the raw side copies the payload into each zmq message).
  auto chunk = make_envelope(bulk_chunk{id, 0, uint64_t(source.size() * count), source});
  const auto t0 = clock_type::now();
  for (size_t i = 0; i < count; ++i) {
    send_status status;
    while ((status = plane.send("bench-child", chunk)) == send_status::queue_full)
      std::this_thread::sleep_for(std::chrono::microseconds(50)); // pushed back: retry
    if (status != send_status::ok)
      throw std::runtime_error(std::string("zmq plane bench: send: ") + to_string(status));
  }
  got.wait([&] { return got.acks.count(id) > 0; }, "a bulk_ack");
  return gib / std::chrono::duration<double>(clock_type::now() - t0).count();
}

// 64 B round trips, ours then raw.
nlohmann::json round_trips(zmq_plane& plane, replies& got, zmq::socket_t& dealer,
                           const schedule& s) {
  const auto ours_us = plane_round_trips(plane, got, s.warmup, s.rounds);
  std::vector<double> raw_us;
  const auto payload = std::vector<char>(64, 'x');
  for (int i = 1; i <= s.warmup + s.rounds; ++i) {
    const auto t0 = clock_type::now();
    dealer.send(zmq::message_t(payload.data(), payload.size()), zmq::send_flags::none);
    raw_receive(dealer);
    if (i > s.warmup) raw_us.push_back(micros(clock_type::now() - t0));
  }
  nlohmann::json latency = {{"ours", summary(ours_us)}, {"raw", summary(raw_us)}};
  latency["ratio_median"] =
      latency["ours"]["median"].get<double>() / latency["raw"]["median"].get<double>();
  return latency;
}

// Bursts of the k-th size, ours and raw interleaved so that load from elsewhere hits both alike;
// the best of the reps each.
nlohmann::json burst_row(zmq_plane& plane, replies& got, zmq::socket_t& dealer, const schedule& s,
                         size_t k) {
  const size_t size = s.sizes[k], count = s.counts[k];
  const double gib = double(size) * double(count) / double(1 << 30);
  std::vector<char> source(size, 'b');
  std::vector<double> ours_gibps, raw_gibps;
  for (int rep = 0; rep < s.reps; ++rep) {
    ours_gibps.push_back(plane_burst(plane, got, source, count, k * 100 + rep + 1));
    const auto t0 = clock_type::now();
    for (size_t i = 0; i < count; ++i)
      dealer.send(zmq::message_t(source.data(), size), zmq::send_flags::none);
    raw_receive(dealer);
    raw_gibps.push_back(gib / std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  const double ours = *std::max_element(ours_gibps.begin(), ours_gibps.end());
  const double raw = *std::max_element(raw_gibps.begin(), raw_gibps.end());
  return {{"bytes", size},           {"messages", count},   {"ours_GiB_per_s", ours},
          {"raw_GiB_per_s", raw},    {"ratio", ours / raw}, {"ours_samples", ours_gibps},
          {"raw_samples", raw_gibps}};
}

// The parent's plane of a pair, connected to its child and heard from.
struct parent_plane {
  replies got;
  zmq_plane plane;

  static zmq_plane_options options(const endpoints& ep, const bench_keys& keys) {
    zmq_plane_options o;
    o.self = "bench-parent";
    o.control_endpoint = ep.parent_control;
    o.bulk_endpoint = ep.parent_bulk;
    o.keys = keys;
    // Raw zmq queues a whole burst; so may we, or the bench would measure our retry loop.
    o.queue_bytes_limit = size_t{1} << 30;
    return o;
  }
  parent_plane(const endpoints& ep, const bench_keys& keys) : plane(options(ep, keys)) {
    plane.set_handler([this](const peer_id&, envelope msg) {
      std::lock_guard lock(got.m);
      if (auto* p = msg.get<pong>())
        got.last_pong = p->seq;
      else if (auto* a = msg.get<bulk_ack>())
        got.acks.insert(a->transfer_id);
      else if (msg.is<member_join>())
        got.joined = true;
      got.cv.notify_all();
    });
    plane.connect("bench-child", ep.child_control, ep.child_bulk);
    plane.start();
    got.wait([&] { return got.joined; }, "the child plane");
  }
  ~parent_plane() {
    plane.send("bench-child", make_envelope(member_leave{"bench-parent", "bench done"}));
    plane.stop();
  }
};

nlohmann::json measure(const endpoints& ep, const schedule& s) {
  register_control_messages();
  parent_plane parent(ep, nullptr);
  auto& plane = parent.plane;
  auto& got = parent.got;

  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::routing_id, "bench-parent");
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 60000);
  dealer.connect(ep.raw);

  const auto latency = round_trips(plane, got, dealer, s);
  nlohmann::json bandwidth = nlohmann::json::array();
  bool target_met = true;
  for (size_t k = 0; k < s.sizes.size(); ++k) {
    bandwidth.push_back(burst_row(plane, got, dealer, s, k));
    if (s.sizes[k] >= (size_t{64} << 10) && bandwidth.back()["ratio"].get<double>() < 0.9)
      target_met = false;
  }
  dealer.close();
  ctx.close();
  return {{"round_trip_64B_us", latency},
          {"bandwidth", bandwidth},
          {"within_10_percent_of_raw_at_64KiB_and_up", target_met}};
}

// Four consecutive tcp ports on 127.0.0.1 from `base`: parent control, bulk, child control, bulk.
endpoints tcp_endpoints(int base) {
  auto at = [&](int i) { return "tcp://127.0.0.1:" + std::to_string(base + i); };
  return {at(0), at(1), at(2), at(3), ""};
}

// CURVE off and on side by side, alternating between the pairs (blocks of 64 B round trips, then
// bursts of bulk_chunks rep by rep), so the machine's load hits both alike.
nlohmann::json measure_curve(const endpoints& off_ep, const endpoints& on_ep,
                             const bench_keys& keys, bool quick) {
  register_control_messages();
  parent_plane off(off_ep, nullptr), on(on_ep, keys);
  const int warmup = 200, blocks = quick ? 4 : 20, block = 500, reps = quick ? 3 : 5;
  std::vector<double> off_us, on_us;
  for (int b = 0; b < blocks; ++b)
    for (auto [pair, us] : {std::pair{&off, &off_us}, std::pair{&on, &on_us}}) {
      const auto more = plane_round_trips(pair->plane, pair->got, b == 0 ? warmup : 0, block);
      us->insert(us->end(), more.begin(), more.end());
    }
  nlohmann::json latency = {{"off", summary(off_us)}, {"on", summary(on_us)}};
  latency["ratio_median"] =
      latency["on"]["median"].get<double>() / latency["off"]["median"].get<double>();

  nlohmann::json bandwidth = nlohmann::json::array();
  const size_t burst = quick ? size_t{64} << 20 : size_t{256} << 20;
  uint64_t id = 1;
  for (size_t size : {size_t{256} << 10, size_t{1} << 20, size_t{64} << 20}) {
    const std::vector<char> source(size, 'k');
    const size_t count = burst / size;
    double best_off = 0, best_on = 0;
    for (int rep = 0; rep < reps; ++rep) {
      best_off = std::max(best_off, plane_burst(off.plane, off.got, source, count, id++));
      best_on = std::max(best_on, plane_burst(on.plane, on.got, source, count, id++));
    }
    bandwidth.push_back({{"bytes", size},
                         {"messages", count},
                         {"off_GiB_per_s", best_off},
                         {"on_GiB_per_s", best_on},
                         {"ratio", best_on / best_off}});
  }
  return {{"round_trip_64B_us", latency}, {"bandwidth", bandwidth}};
}

} // namespace

nlohmann::json run_zmq_curve_bench(bool quick) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("sn-zmq-curve-bench-" + std::to_string(getpid()));
  auto keys = std::make_shared<const cluster_keys>(dir / "keys");
  keys->ensure({"bench-parent", "bench-child"});
  const int base = free_tcp_port_range(8, 13);
  const endpoints off_ep = tcp_endpoints(base), on_ep = tcp_endpoints(base + 4);
  // Children first, then the parent's contexts: zmq contexts must not cross a fork.
  auto off_child = spawn([&] { return ours_child(off_ep, nullptr); });
  auto on_child = spawn([&] { return ours_child(on_ep, keys); });
  nlohmann::json result;
  try {
    result = measure_curve(off_ep, on_ep, keys, quick);
    off_child.wait();
    on_child.wait();
  } catch (const std::exception& e) {
    off_child.kill();
    on_child.kill();
    result = {{"error", e.what()}};
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  result["transport"] = "tcp loopback, two processes per pair";
  result["quick"] = quick;
  result["note"] = "zmq_plane without keys (off) and with CurveZMQ (on: every message encrypted "
                   "and authenticated, ZAP names the sender); bandwidth: best of reps of one-way "
                   "bulk_chunk bursts acknowledged at the end, the pairs alternating rep by rep; "
                   "ratio = on / off";
  return result;
}

nlohmann::json run_zmq_plane_bench(bool quick) {
  const schedule s = make_schedule(quick);
  const endpoints ep = make_endpoints();
  // Children first, then the parent's contexts: zmq contexts must not cross a fork.
  auto ours = spawn([&] { return ours_child(ep, nullptr); });
  auto raw = spawn([&] { return raw_child(ep, s); });
  nlohmann::json result;
  try {
    result = measure(ep, s);
    ours.wait();
    raw.wait();
  } catch (const std::exception& e) {
    ours.kill();
    raw.kill();
    for (auto* f : {&ep.child_control, &ep.child_bulk, &ep.raw}) ::unlink(f->substr(6).c_str());
    result = {{"error", e.what()}};
  }
  result["plane"] = "zmq";
  result["transport"] = "ipc, two processes";
  result["quick"] = quick;
  result["note"] =
      "ours: zmq_plane with frame + MessagePack (bulk_chunk/ping); bodies of 32 KiB "
      "and up are sent as their own zero-copy part and the decoded message references "
      "the received zmq message (no copy either way); raw: cppzmq DEALER/ROUTER, "
      "payload copied into a zmq message, not touched on receive. Bandwidth: best of reps, one-way "
      "bursts acknowledged at the end; ratio = ours / raw. Both receiving children "
      "reuse their heap (mallopt: one arena, no mmap); our sender may queue 1 GiB";
  return result;
}

} // namespace supernode::apps
