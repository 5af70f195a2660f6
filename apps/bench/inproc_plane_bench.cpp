#include "apps/bench/inproc_plane_bench.hpp"

#include "transport/control_messages.hpp"
#include "transport/inproc_plane.hpp"

#include <algorithm>
#include <chrono>
#include <future>

namespace supernode::apps {

using namespace transport;

nlohmann::json run_inproc_plane_bench(bool quick) {
  register_control_messages();
  auto hub = inproc_hub::create();
  inproc_plane a(hub, "bench-a"), b(hub, "bench-b");
  b.set_handler([&](const peer_id& from, envelope m) {
    if (auto* p = m.get<ping>()) b.send(from, make_envelope(pong{p->seq, p->sent_ns, {}}));
  });
  std::promise<void>* waiting = nullptr;
  std::mutex mu;
  a.set_handler([&](const peer_id&, envelope) {
    std::lock_guard lock(mu);
    if (waiting) waiting->set_value();
    waiting = nullptr;
  });
  a.start();
  b.start();

  const int rounds = quick ? 2000 : 20000;
  std::vector<double> us;
  us.reserve(rounds);
  auto msg = make_envelope(ping{0, 0, std::vector<char>(64, 'x')});
  for (int i = 0; i < rounds; ++i) {
    std::promise<void> done;
    auto f = done.get_future();
    {
      std::lock_guard lock(mu);
      waiting = &done;
    }
    auto t0 = std::chrono::steady_clock::now();
    a.send("bench-b", msg);
    f.wait();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  a.stop();
  b.stop();
  return {{"plane", "inproc"},
          {"round_trip_64B_us", {{"median", us[us.size() / 2]}, {"p99", us[us.size() * 99 / 100]}}},
          {"note", "object hand-off: bandwidth does not depend on message size (no copy)"}};
}

} // namespace supernode::apps
