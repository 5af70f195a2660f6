#include "apps/bench/kernel_bench_onednn.hpp"

#include "apps/bench/kernel_bench_baselines.hpp"
#include "kernels/quantize.hpp"
#include "kernels/thread_pool.hpp"

#include <cstdlib>
#include <fcntl.h>
#include <iostream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace supernode::apps::kernel_bench {

std::string onednn_cap_for(kernels::kernel_isa isa) {
  switch (isa) {
  case kernels::kernel_isa::avx2:
    return "avx2";
  case kernels::kernel_isa::avx_vnni:
    return "avx2_vnni";
  case kernels::kernel_isa::avx512_vnni:
    return "avx512_core_vnni";
  case kernels::kernel_isa::amx:
    return "avx512_core_amx";
  case kernels::kernel_isa::portable:
    break;
  }
  return "";
}

onednn_worker::onednn_worker(std::string cap, int threads, bool quick) : cap_(std::move(cap)) {
  int to_child[2], from_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0) return;
  if (::pipe2(from_child, O_CLOEXEC) != 0) {
    ::close(to_child[0]);
    ::close(to_child[1]);
    return;
  }
  std::vector<std::string> args = {"supernode",
                                   "bench",
                                   "kernels",
                                   "--onednn-worker",
                                   cap_,
                                   "--threads",
                                   std::to_string(threads)};
  if (quick) args.push_back("--quick");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    // Only async-signal-safe calls between fork and exec: the parent may have threads.
    ::dup2(to_child[0], 0);
    ::dup2(from_child[1], 1);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  ::close(to_child[0]);
  ::close(from_child[1]);
  if (pid_ < 0) {
    ::close(to_child[1]);
    ::close(from_child[0]);
    return;
  }
  to_ = ::fdopen(to_child[1], "w");
  from_ = ::fdopen(from_child[0], "r");
}

onednn_worker::~onednn_worker() {
  if (to_) std::fclose(to_); // end of input: the worker's loop ends
  if (from_) std::fclose(from_);
  if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
}

nlohmann::json onednn_worker::time(const shape& s, int64_t m) {
  if (!to_ || !from_) return nullptr;
  std::fprintf(to_, "%s %lld\n", s.name, static_cast<long long>(m));
  std::fflush(to_);
  char* line = nullptr;
  size_t capacity = 0;
  nlohmann::json reply;
  if (::getline(&line, &capacity, from_) > 0)
    reply = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  std::free(line);
  return reply.is_discarded() ? nlohmann::json() : reply;
}

namespace {
// The weights of one shape as oneDNN takes them: plain s8 W[n][k] and our per-channel scales.
struct plain_weights {
  const shape* of = nullptr;
  std::vector<int8_t> q;
  std::vector<float> scale;

  void build(const shape& s) {
    const auto wf = shape_weights(s);
    q.resize(static_cast<size_t>(s.n * s.k));
    scale.resize(static_cast<size_t>(s.n));
    for (int64_t r = 0; r < s.n; ++r)
      scale[r] = kernels::quantize_row(wf.data() + r * s.k, s.k, q.data() + r * s.k);
    of = &s;
  }
};
} // namespace

int run_onednn_worker(const std::string& cap, int threads, bool quick) {
  onednn_int8_matmul::init(threads, cap);
  kernels::thread_pool::configure_shared(threads); // our quantization runs beside oneDNN's GEMM
  kernels::thread_pool& pool = kernels::thread_pool::shared();
  plain_weights w;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string name;
    long long m = 0;
    in >> name >> m;
    const shape* s = find_shape(name.c_str());
    if (!s || m < 1 || !onednn_int8_matmul::available()) {
      std::cout << "null" << std::endl;
      continue;
    }
    if (w.of != s) w.build(*s);
    const auto x = shape_activations(*s, m);
    kernels::quantized_rows xq;
    kernels::quantize_rows(x.data(), m, s->k, s->k, xq);
    onednn_int8_matmul mm(w.q.data(), s->n, s->k, m, xq.stride);
    std::vector<int32_t> acc(static_cast<size_t>(m * s->n));
    std::vector<float> y(static_cast<size_t>(m * s->n));
    // The same per-token quantization and the same scale epilogue as ours, spread over the pool.
    const double t_all = median_seconds(
        [&] {
          kernels::quantize_rows(x.data(), m, s->k, s->k, xq);
          mm.run(xq.q.data(), acc.data());
          pool.parallel_for(m, [&](int64_t r) {
            for (int64_t c = 0; c < s->n; ++c)
              y[r * s->n + c] = static_cast<float>(acc[r * s->n + c]) * xq.scale[r] * w.scale[c];
          });
        },
        timing_budget(quick));
    const double t_mm =
        median_seconds([&] { mm.run(xq.q.data(), acc.data()); }, timing_budget(quick) / 2);
    auto f = figures(t_all, m, *s, static_cast<double>(s->n * s->k + s->n * 4));
    f["matmul_only_ms"] = t_mm * 1e3;
    f["impl"] = mm.implementation();
    f["isa"] = onednn_int8_matmul::effective_isa();
    std::cout << f.dump() << std::endl;
  }
  return 0;
}

} // namespace supernode::apps::kernel_bench
