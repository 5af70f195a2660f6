#include "apps/bench/shm_plane_bench.hpp"

#include "services/cluster/process_launcher.hpp"
#include "transport/control_messages.hpp"
#include "transport/shm_plane.hpp"
#include "transport/shm_region.hpp"
#include "transport/shm_ring.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

namespace supernode::apps {

namespace {

using namespace transport;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

nlohmann::json latency_summary(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  return {{"median_us", us[us.size() / 2]},
          {"p99_us", us[std::min(us.size() - 1, us.size() * 99 / 100)]},
          {"mean_us", sum / static_cast<double>(us.size())},
          {"samples", us.size()}};
}

// The schedule both processes follow; the child is a fork, so it computes the same one.
struct schedule {
  int rtt_warmup, rtt_iterations;
  std::vector<size_t> sizes;
  size_t bytes_per_size;
  size_t reps(size_t size) const { return std::max<size_t>(bytes_per_size / size, 3); }
};

// Flags of the control region: child up; child done with the bare-ring echo; quit.
enum control_flag : size_t { child_ready = 0, quit = 1, control_flags = 2 };
// Flags of the bandwidth region: rounds written by the parent, rounds seen by the child.
enum bw_flag : size_t { written = 0, seen = 1 };

// ---- the child: echoes on the bare rings, serves the plane, acknowledges region rounds -----

int run_child(const std::string& cluster, const schedule& s, shm_region& control, shm_region& bw) {
  alarm(300); // a parent that dies mid-bench must not leave us running
  int rc = 0;
  try {
    register_control_messages();
    shm_plane plane(cluster, "bench-server");
    std::map<uint64_t, uint64_t> received;
    plane.set_handler([&](const peer_id& from, envelope e) {
      if (const auto* p = e.get<ping>()) {
        while (plane.send(from, make_envelope(pong{p->seq, p->sent_ns, p->payload})) ==
               send_status::queue_full)
          std::this_thread::yield();
      } else if (const auto* c = e.get<bulk_chunk>()) {
        auto& got = received[c->transfer_id];
        got += c->data.size();
        if (got == c->total_bytes)
          while (plane.send(from, make_envelope(bulk_ack{c->transfer_id, got, 0})) ==
                 send_status::queue_full)
            std::this_thread::yield();
      }
    });
    plane.start();
    auto req = shm_ring::open(cluster, "bench.req", ring_role::consumer);
    auto rsp = shm_ring::open(cluster, "bench.rsp", ring_role::producer);
    control.publish(child_ready, 1);
    for (int i = 0; i < s.rtt_warmup + s.rtt_iterations; ++i) {
      if (!req.wait_for_data(10s)) throw std::runtime_error("bare ring: no request");
      auto r = req.peek();
      while (rsp.try_push(r->tag, r->bytes) != ring_status::ok)
        rsp.wait_for_space(r->bytes.size(), 1s);
      req.pop();
    }
    uint64_t round = 0;
    for (size_t size : s.sizes)
      for (size_t i = 0; i < s.reps(size); ++i) {
        ++round;
        if (!bw.wait(written, round, 20s))
          throw std::runtime_error("region: round " + std::to_string(round) + " never came");
        bw.publish(seen, round);
      }
    control.wait(quit, 1, 120s);
    plane.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shm bench child: %s\n", e.what());
    rc = 1;
  }
  return rc;
}

// ---- the parent's measurements ----------------------------------------------------------

nlohmann::json bare_ring_rtt(const schedule& s, shm_ring& req, shm_ring& rsp) {
  std::vector<std::byte> msg(64, std::byte{1});
  std::vector<double> us;
  for (int i = 0; i < s.rtt_warmup + s.rtt_iterations; ++i) {
    const auto t0 = clock_type::now();
    while (req.try_push(static_cast<uint32_t>(i), msg) != ring_status::ok)
      req.wait_for_space(msg.size(), 1s);
    if (!rsp.wait_for_data(10s)) throw std::runtime_error("bare ring: no reply");
    rsp.peek();
    rsp.pop();
    if (i >= s.rtt_warmup) us.push_back(seconds_since(t0) * 1e6);
  }
  return latency_summary(std::move(us));
}

struct client {
  std::mutex m;
  std::condition_variable cv;
  std::vector<double> rtt_us;
  int pings_left = 0, warmup_left = 0;
  std::map<uint64_t, bool> acked;
};

nlohmann::json plane_rtt(const schedule& s, shm_plane& plane, client& c) {
  // The next ping leaves from the pong handler, on the receiving thread, so only the two
  // receiving threads run during the measurement (the machine may have two cores).
  {
    std::lock_guard lock(c.m);
    c.warmup_left = s.rtt_warmup;
    c.pings_left = s.rtt_iterations;
  }
  ping first;
  first.payload = std::vector<char>(64, 'p');
  first.sent_ns = static_cast<uint64_t>(clock_type::now().time_since_epoch().count());
  plane.send("bench-server", make_envelope(first));
  std::unique_lock lock(c.m);
  if (!c.cv.wait_for(lock, 60s, [&] { return c.pings_left == 0; }))
    throw std::runtime_error("plane round trips did not finish");
  return latency_summary(c.rtt_us);
}

double plane_bandwidth(shm_plane& plane, client& c, size_t size, size_t reps, uint64_t transfer) {
  // One message object sent `reps` times: what is timed is the plane (encode, ring, decode).
  const auto e = make_envelope(bulk_chunk{transfer, 0, size * reps, std::vector<char>(size, 'b')});
  const auto t0 = clock_type::now();
  for (size_t i = 0; i < reps; ++i) {
    while (plane.send("bench-server", e) == send_status::queue_full) std::this_thread::yield();
  }
  std::unique_lock lock(c.m);
  if (!c.cv.wait_for(lock, 60s, [&] { return c.acked.count(transfer) > 0; }))
    throw std::runtime_error("bulk transfer was not acknowledged");
  return static_cast<double>(size * reps) / seconds_since(t0) / 1e9;
}

double region_bandwidth(shm_region& bw, const std::vector<std::byte>& src, size_t size, size_t reps,
                        uint64_t& round) {
  // Double-buffered like the MoE dispatch buffers: round r goes to half r % 2 once the child has
  // seen round r - 2, so writing overlaps the child's wake-up.
  const uint64_t first = round;
  const auto t0 = clock_type::now();
  for (size_t i = 0; i < reps; ++i) {
    ++round;
    if (round > first + 2 && !bw.wait(seen, round - 2, 20s))
      throw std::runtime_error("region: child stopped acknowledging");
    bw.write((round % 2) * (bw.size() / 2), std::span(src.data(), size));
    bw.publish(written, round);
  }
  if (!bw.wait(seen, round, 20s)) throw std::runtime_error("region: last round not acknowledged");
  return static_cast<double>(size * reps) / seconds_since(t0) / 1e9;
}

double memcpy_bandwidth(std::vector<std::byte>& dst, const std::vector<std::byte>& src, size_t size,
                        size_t reps) {
  const auto t0 = clock_type::now();
  for (size_t i = 0; i < reps; ++i) {
    std::memcpy(dst.data() + (i % 2) * (dst.size() / 2), src.data(), size);
    asm volatile("" ::: "memory"); // keep every copy
  }
  return static_cast<double>(size * reps) / seconds_since(t0) / 1e9;
}

// The parent's plane: each pong sends the next ping until the round trips are done; each
// bulk_ack marks its transfer.
void answer_pongs_and_acks(shm_plane& plane, client& c) {
  plane.set_handler([&](const peer_id& from, envelope e) {
    if (const auto* p = e.get<pong>()) {
      const auto now = clock_type::now().time_since_epoch().count();
      std::lock_guard lock(c.m);
      if (c.warmup_left > 0)
        --c.warmup_left;
      else if (c.pings_left > 0) {
        c.rtt_us.push_back(static_cast<double>(now - static_cast<int64_t>(p->sent_ns)) / 1e3);
        --c.pings_left;
      }
      if (c.pings_left == 0) {
        c.cv.notify_all();
        return;
      }
      ping next{p->seq + 1, static_cast<uint64_t>(clock_type::now().time_since_epoch().count()),
                p->payload};
      plane.send(from, make_envelope(std::move(next)));
    } else if (const auto* a = e.get<bulk_ack>()) {
      std::lock_guard lock(c.m);
      c.acked[a->transfer_id] = true;
      c.cv.notify_all();
    }
  });
}

double idle_cpu_fraction(std::chrono::milliseconds idle) {
  const std::clock_t cpu0 = std::clock();
  const auto idle_t0 = clock_type::now();
  std::this_thread::sleep_for(idle);
  return (static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC) / seconds_since(idle_t0);
}

// Per size: the plane, the bare region and memcpy, in GB/s.
nlohmann::json bandwidth_rows(const schedule& s, shm_plane& plane, client& c, shm_region& bw,
                              const std::vector<std::byte>& src, std::vector<std::byte>& dst) {
  uint64_t round = 0, transfer = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (size_t size : s.sizes) {
    const size_t reps = s.reps(size);
    const double plane_gbs = plane_bandwidth(plane, c, size, reps, ++transfer);
    const double region_gbs = region_bandwidth(bw, src, size, reps, round);
    const double memcpy_gbs = memcpy_bandwidth(dst, src, size, reps);
    rows.push_back({{"bytes", size},
                    {"messages", reps},
                    {"memcpy_gbs", memcpy_gbs},
                    {"plane_gbs", plane_gbs},
                    {"region_gbs", region_gbs},
                    {"plane_vs_memcpy", plane_gbs / memcpy_gbs},
                    {"region_vs_memcpy", region_gbs / memcpy_gbs}});
  }
  return rows;
}

// Where a 64 MiB plane message spends its time (one process, no ring): the encode (the body is
// spliced by reference) and the decode of a reassembled frame (the body is referenced), next to
// one memcpy of the payload, which is what the ring costs per side.
nlohmann::json plane_cost(const std::vector<std::byte>& src, std::vector<std::byte>& dst) {
  const size_t max_size = src.size();
  const auto e = make_envelope(bulk_chunk{0, 0, max_size, std::vector<char>(max_size, 'x')});
  auto t0 = clock_type::now();
  auto spliced = e.encode_spliced();
  const double encode_ms = seconds_since(t0) * 1e3;
  std::shared_ptr<const byte_buffer> frame = std::make_shared<byte_buffer>(spliced.flatten());
  frame_error_counters errors;
  t0 = clock_type::now();
  auto back = decode_frame(frame->bytes(), frame, errors);
  const double decode_ms = seconds_since(t0) * 1e3;
  t0 = clock_type::now();
  std::memcpy(dst.data(), src.data(), max_size);
  const double memcpy_ms = seconds_since(t0) * 1e3;
  return {{"encode", encode_ms},
          {"decode", decode_ms},
          {"one_memcpy", memcpy_ms},
          {"ok", back.has_value()}};
}

nlohmann::json targets(double rtt, const nlohmann::json& rows) {
  double worst_region_ratio = 1e9;
  for (auto& r : rows)
    if (r["bytes"].get<size_t>() >= (1u << 20))
      worst_region_ratio = std::min(worst_region_ratio, r["region_vs_memcpy"].get<double>());
  return {{"plane_rtt_median_us_max", 2.0},
          {"plane_rtt_met", rtt <= 2.0},
          {"region_vs_memcpy_min_at_1MiB_and_up", 0.7},
          {"region_worst_ratio_at_1MiB_and_up", worst_region_ratio},
          {"region_bandwidth_met", worst_region_ratio >= 0.7}};
}

} // namespace

nlohmann::json run_shm_plane_bench(bool quick) {
  register_control_messages();
  schedule s;
  s.rtt_warmup = quick ? 200 : 2000;
  s.rtt_iterations = quick ? 2000 : 20000;
  s.sizes = {4u << 10, 64u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20};
  s.bytes_per_size = quick ? (128u << 20) : (512u << 20);
  const size_t max_size = s.sizes.back();

  const std::string cluster = "bench" + std::to_string(getpid());
  cleanup_stale_segments(cluster);
  // Everything the child needs exists before the fork; the child inherits the mappings.
  auto control = shm_region::create(cluster, "control", 0, control_flags);
  auto bw = shm_region::create(cluster, "bw", 2 * max_size, 2);
  // Steady state, as for the MoE buffers that live for the whole run: the region's pages exist
  // before timing (the memcpy baseline's destination is touched the same way).
  std::memset(bw.data(), 0, bw.size());
  auto req = shm_ring::create(cluster, "bench.req", 1 << 16, ring_role::producer);
  auto rsp = shm_ring::create(cluster, "bench.rsp", 1 << 16, ring_role::consumer);
  auto child = services::cluster::child_process::fork_running(
      [&] { return run_child(cluster, s, control, bw); });

  nlohmann::json out;
  out["processes"] = 2;
  try {
    if (!control.wait(child_ready, 1, 20s))
      throw std::runtime_error("shm bench: child did not start");
    out["rtt_64B"]["bare_ring"] = bare_ring_rtt(s, req, rsp);

    shm_plane plane(cluster, "bench-client");
    client c;
    answer_pongs_and_acks(plane, c);
    plane.start();
    out["rtt_64B"]["plane"] = plane_rtt(s, plane, c);
    out["rtt_64B"]["iterations"] = s.rtt_iterations;

    // Idle cost: both planes are up and waiting; their threads should sleep on futexes.
    out["idle_cpu_fraction_of_one_core"] = idle_cpu_fraction(quick ? 200ms : 1s);

    std::vector<std::byte> src(max_size), dst(2 * max_size);
    for (size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i * 131);
    std::memset(dst.data(), 0, dst.size());
    const auto rows = bandwidth_rows(s, plane, c, bw, src, dst);
    out["bandwidth"] = rows;
    out["plane_cost_64MiB_ms"] = plane_cost(src, dst);
    out["plane_bad_frames"] = plane.counters().bad_frames.total();
    control.publish(quit, 1);
    plane.stop();

    out["targets"] = targets(out["rtt_64B"]["plane"]["median_us"], rows);
  } catch (...) {
    control.publish(quit, 1);
    child.kill();
    throw;
  }
  out["child_exit_status"] = child.wait().code();
  return out;
}

} // namespace supernode::apps
